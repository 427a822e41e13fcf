import Foundation
import Testing

@testable import PushRegistration

/// push-api's answers as the client reads them (the statuses and bodies are those of
/// openapi.yaml; the integration tests get them from push-api itself).
@Suite("Server answers")
struct ServerAnswerTests {
    let now = Date(timeIntervalSince1970: 1_800_000_000)
    static func body(_ text: String) -> Data { Data(text.utf8) }
    static let envelope = body(#"{"code":"VALIDATION_FAILED","status":"BAD_REQUEST","message":"token must be 1 to 500 characters"}"#)

    @Test func aRegistrationAnswersItsRowsID() {
        let device = Self.body(#"{"id":6,"token":"t","isActive":true,"platform":"ios","tokenType":"fcm"}"#)
        #expect(ServerAnswer.registration(status: 201, body: device, retryAfter: nil, now: now) == .success(6))
        #expect(ServerAnswer.registration(status: 200, body: device, retryAfter: nil, now: now) == .success(6))
        // Written but unreadable: sent again (an upsert) rather than taken as done.
        guard case .retry(nil, _) = ServerAnswer.registration(status: 200, body: Self.body("<html>"), retryAfter: nil, now: now) else {
            Issue.record("an unreadable 200 is not retried")
            return
        }
    }

    @Test func statusesThatAskToComeBackLater() {
        let statuses = [408, 429, 500, 502, 503, 504]
        for status in statuses {
            guard case .retry = ServerAnswer.registration(status: status, body: Data(), retryAfter: nil, now: now) else {
                Issue.record("HTTP \(status) is not retried")
                continue
            }
        }
        let limited = ServerAnswer.registration(
            status: 429, body: Self.body(#"{"code":"RATE_LIMITED","status":"TOO_MANY_REQUESTS","message":"slow down"}"#),
            retryAfter: "7", now: now)
        #expect(limited == .retry(after: .seconds(7), reason: "HTTP 429 RATE_LIMITED: slow down"))
    }

    @Test func refusalsCarryTheEnvelopesCodeAndMessage() {
        #expect(
            ServerAnswer.registration(status: 400, body: Self.envelope, retryAfter: nil, now: now)
                == .refused(reason: "HTTP 400 VALIDATION_FAILED: token must be 1 to 500 characters"))
        #expect(ServerAnswer.registration(status: 403, body: Data(), retryAfter: nil, now: now) == .refused(reason: "HTTP 403"))
        #expect(ServerAnswer.registration(status: 401, body: Data(), retryAfter: nil, now: now) == .unauthorized)
    }

    @Test func aDeactivationIsDoneWhenTheRowIsInactiveOrNotTheAccountsAnyMore() {
        #expect(ServerAnswer.deactivation(row: 6, status: 204, body: Data(), retryAfter: nil, now: now) == .success(.device(6)))
        #expect(ServerAnswer.deactivation(row: 6, status: 404, body: Data(), retryAfter: nil, now: now) == .success(.nothingActive))
        #expect(ServerAnswer.deactivation(row: 6, status: 401, body: Data(), retryAfter: nil, now: now) == .unauthorized)
        guard case .retry = ServerAnswer.deactivation(row: 6, status: 503, body: Data(), retryAfter: nil, now: now) else {
            Issue.record("a 503 is not retried")
            return
        }
    }

    @Test func retryAfterInSecondsOrAsAnHTTPDate() {
        #expect(ServerAnswer.retryAfter("120", now: now) == .seconds(120))
        #expect(ServerAnswer.retryAfter(" 3 ", now: now) == .seconds(3))
        let inNinety = now.addingTimeInterval(90)
        let format = DateFormatter()
        format.locale = Locale(identifier: "en_US_POSIX")
        format.timeZone = TimeZone(identifier: "GMT")
        format.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        #expect(ServerAnswer.retryAfter(format.string(from: inNinety), now: now) == .seconds(90))
        #expect(ServerAnswer.retryAfter(format.string(from: now.addingTimeInterval(-60)), now: now) == .zero)
        for unreadable in [nil, "", "-5", "soon", "1.5"] {
            #expect(ServerAnswer.retryAfter(unreadable, now: now) == nil, "\(unreadable ?? "nil")")
        }
    }

    @Test func aDevicePageWithPushAPIsTimestamps() throws {
        let page = Self.body(
            #"{"devices":[{"createdAt":"2026-11-25T18:02:29.321Z","deviceId":"iphone-15-A1B2","id":8,"isActive":false,"#
                + #""deactivatedAt":"2026-11-25T18:05:00Z","deactivationReason":"logout","lastUsedAt":"2026-11-25T18:02:29.321Z","#
                + #""platform":"ios","token":"t","tokenType":"fcm"}],"nextCursor":"8"}"#)
        guard case .success(let read) = ServerAnswer.devicePage(status: 200, body: page, retryAfter: nil, now: now) else {
            Issue.record("the page is not read")
            return
        }
        #expect(read.nextCursor == "8")
        let device = try #require(read.devices.first)
        #expect(device.id == 8 && device.deviceId == "iphone-15-A1B2" && !device.isActive && device.deactivationReason == "logout")
        #expect(abs(device.createdAt.timeIntervalSince1970 - 1_795_629_749.321) < 0.001)
        #expect(
            ServerAnswer.devicePage(status: 200, body: Self.body("{}"), retryAfter: nil, now: now)
                == .refused(reason: "HTTP 200 with an unreadable device list"))
    }
}
