import DeviceRegistry
import Foundation
import NIOCore
import NIOFoundationCompat
import Testing

@testable import FCMEmulator
@testable import PushDispatch

/// The message id kept from FCM's success answer, whatever its whitespace, escapes and other members.
@Suite("FCM success answers")
struct SendOutcomeTests {
    private func messageID(_ body: String) -> SendOutcome {
        SendOutcome.classify(status: 200, body: ByteBuffer(string: body), retryAfter: nil)
    }

    @Test(arguments: [
        "{\n  \"name\": \"projects/wowa-7/messages/0:1500415314455276%31bd1c9631bd1c96\"\n}\n",
        "{\"name\":\"projects/wowa-7/messages/0:1500415314455276%31bd1c9631bd1c96\"}",
        " \r\n\t{ \"name\" :\t\"projects/wowa-7/messages/0:1500415314455276%31bd1c9631bd1c96\" } ",
    ])
    func whateverTheWhitespace(body: String) {
        #expect(messageID(body) == .sent(messageID: "0:1500415314455276%31bd1c9631bd1c96"))
    }

    @Test(arguments: [
        (#"{"name":"projects\/wowa-7\/messages\/42"}"#, "42"),  // escaped slashes
        (#"{"name":"projects/wowa-7/messages/42","extra":1}"#, "42"),  // another field
        (#"{"extra":{"name":"x"},"name":"projects/wowa-7/messages/42"}"#, "42"),  // name not first
        ("{\"name\":\"projects/wowa-7/messages/4\u{1}2\"}", ""),  // a raw control character: not JSON
        (#"{"name":"messages-without-a-path"}"#, "messages-without-a-path"),
        ("", ""),
    ])
    func whateverTheShape(body: String, id: String) {
        #expect(messageID(body) == (id.isEmpty ? .sentUnreadable(body: body) : .sent(messageID: id)))
    }

    @Test func anyTwoHundredIsAcceptedAndOneNamingNoMessageIsCountedApart() {
        #expect(
            SendOutcome.classify(status: 201, body: ByteBuffer(string: #"{"name":"projects/p/messages/7"}"#), retryAfter: nil)
                == .sent(messageID: "7"))
        #expect(SendOutcome.classify(status: 204, body: ByteBuffer(), retryAfter: nil) == .sentUnreadable(body: ""))
        #expect(
            SendOutcome.classify(status: 200, body: ByteBuffer(string: "<html>ok</html>"), retryAfter: nil)
                == .sentUnreadable(body: "<html>ok</html>"))
    }

    private static func error(_ status: Int, _ code: String) -> ByteBuffer {
        ByteBuffer(
            string:
                #"{"error":{"code":\#(status),"message":"m","status":"S","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"\#(code)"}]}}"#
        )
    }

    @Test func apnsAuthErrorIsThirdPartyAuthAndUnknownCodesAreReadByStatus() {
        #expect(
            SendOutcome.classify(status: 401, body: Self.error(401, "APNS_AUTH_ERROR"), retryAfter: nil) == .thirdPartyAuth(message: "m"))
        #expect(
            SendOutcome.classify(status: 503, body: Self.error(503, "SOMETHING_NEW"), retryAfter: "3")
                == .transient(errorCode: DeliveryErrorCode(rawValue: "SOMETHING_NEW"), message: "m", retryAfter: .seconds(3), quota: false))
        #expect(
            SendOutcome.classify(status: 429, body: Self.error(429, "SOMETHING_NEW"), retryAfter: nil)
                == .transient(errorCode: DeliveryErrorCode(rawValue: "SOMETHING_NEW"), message: "m", retryAfter: nil, quota: true))
        #expect(
            SendOutcome.classify(status: 400, body: Self.error(400, "SOMETHING_NEW"), retryAfter: nil)
                == .failed(errorCode: DeliveryErrorCode(rawValue: "SOMETHING_NEW"), message: "m"))
    }

    /// Statuses FCM never answers, without a Google error: something else answered (a proxy's
    /// redirect, a wrong base URL), which blames the job's setup, not the device. With a Google
    /// error in the body, a status is that error's.
    @Test(arguments: [301, 302, 304, 405, 407, 413, 418, 499])
    func aStatusFCMNeverAnswersIsNotFCMs(_ status: Int) {
        for body in ["", "<html>moved</html>", "{}"] {
            #expect(
                SendOutcome.classify(status: status, body: ByteBuffer(string: body), retryAfter: nil)
                    == .notFCM(errorCode: .httpStatus(status), message: "HTTP \(status)"))
        }
        let google = ByteBuffer(string: #"{"error":{"code":\#(status),"message":"m","status":"ABORTED"}}"#)
        #expect(
            SendOutcome.classify(status: status, body: google, retryAfter: nil)
                == .failed(errorCode: DeliveryErrorCode(rawValue: "ABORTED"), message: "m"))
    }
}

/// Every FCM answer kept as a file, mapped to what it means for the delivery: the emulator's
/// canned answers (Sources/FCMEmulator/FCMAnswers, which it serves as they are) and the others a
/// sender meets (Fixtures/fcm-answers), each written from FCM's documentation.
@Suite("FCM answers, classified")
struct FCMAnswerTableTests {
    private static let repository = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let folders = [
        repository.appendingPathComponent("Sources/FCMEmulator/FCMAnswers"),
        repository.appendingPathComponent("Tests/PushDispatchTests/Fixtures/fcm-answers"),
    ]

    static let unreadableHTML = "<html><body>OK</body></html>"
    static let projectQuotaMessage =
        "Quota exceeded for quota metric 'Send requests' and limit 'Send requests per minute' of service 'fcm.googleapis.com' for consumer 'project_number:000000000000'."

    /// File name (without .json) → outcome.
    static let expected: [String: SendOutcome] = [
        // The emulator's answers.
        "unregistered": .deadToken(errorCode: .unregistered, message: "Requested entity was not found.", reason: .unregistered),
        "invalid-registration-token": .deadToken(
            errorCode: .invalidArgument, message: "The registration token is not a valid FCM registration token",
            reason: .invalidToken),
        "invalid-registration-fid": .deadToken(
            errorCode: .invalidArgument, message: "The registration token is not a valid FCM registration token",
            reason: .invalidToken),
        "sender-id-mismatch": .senderMismatch(message: "SenderId mismatch"),
        "third-party-auth-error": .thirdPartyAuth(message: "Auth error from APNS or Web Push Service"),
        // One device's rate: that delivery waits, the app goes on.
        "quota-exceeded": .transient(errorCode: .quotaExceeded, message: "Device message rate exceeded.", retryAfter: nil, quota: false),
        // No FcmError: a quota answer by its status, as the SDKs read it.
        "rate-limit-exceeded": .transient(errorCode: .quotaExceeded, message: projectQuotaMessage, retryAfter: nil, quota: true),
        "unavailable": .transient(errorCode: .unavailable, message: "The service is currently unavailable.", retryAfter: nil, quota: false),
        "internal": .transient(errorCode: .internal, message: "Internal error encountered.", retryAfter: nil, quota: false),
        "unauthenticated": .unauthenticated,
        "insufficient-scopes": .permissionDenied(message: "Request had insufficient authentication scopes."),
        // The others.
        "success": .sent(messageID: "0:1500415314455276%31bd1c9631bd1c96"),
        "success-validate-only": .sent(messageID: "fake_message_id"),
        "success-unreadable": .sentUnreadable(body: unreadableHTML),
        "success-truncated": .sentUnreadable(body: #"{"name": "projects/wowa-7/mess"#),
        // Only the message says it is about the token (FCM's own example of an invalid token).
        "invalid-registration-token-documented": .deadToken(
            errorCode: .invalidArgument,
            message: "The registration token is not a valid FCM registration token",
            reason: .invalidToken),
        // Only the BadRequest field does.
        "invalid-registration-token-field-only": .deadToken(
            errorCode: .invalidArgument, message: "Request contains an invalid argument.",
            reason: .invalidToken),
        "invalid-argument-data-value": .payloadRejected(
            errorCode: .invalidArgument,
            message: "Invalid value at 'message.data[0].value' (TYPE_STRING), 12"),
        "invalid-argument-reserved-data-key": .payloadRejected(errorCode: .invalidArgument, message: "Invalid data payload key: from"),
        // FCM quoting the sender's own words never deactivates a device.
        "invalid-argument-quoting-registration-token": .payloadRejected(
            errorCode: .invalidArgument, message: "Invalid data payload key: Google registration token"),
        "invalid-argument-quoting-registration-token-without-field": .payloadRejected(
            errorCode: .invalidArgument,
            message: "Invalid value at 'message.notification.title': registration token expired, sign in again"),
        "invalid-argument-without-details": .payloadRejected(errorCode: .invalidArgument, message: "Request contains an invalid argument."),
        // Whether one device's such answer may end a job is the delivery policy's rule, not this table's.
        "bare-400": .payloadRejected(errorCode: .invalidArgument, message: "HTTP 400"),
        "bare-404": .notFound(message: "HTTP 404"),
        "not-found-without-fcm-error": .notFound(message: "Requested entity was not found."),
        "apns-auth-error": .thirdPartyAuth(message: "Auth error from APNS or Web Push Service"),
        "permission-denied": .permissionDenied(
            message:
                "Permission 'cloudmessaging.messages.create' denied on resource '//cloudresourcemanager.googleapis.com/projects/wowa-7' (or it may not exist)."
        ),
        "unauthenticated-missing-credential": .unauthenticated,
        "unavailable-with-retry-after": .transient(
            errorCode: .unavailable, message: "The service is currently unavailable.",
            retryAfter: .seconds(30), quota: false),
        "quota-exceeded-with-retry-after": .transient(
            errorCode: .quotaExceeded, message: "Device message rate exceeded.",
            retryAfter: .seconds(7), quota: false),
        // The project's message rate: the whole app slows down.
        "quota-exceeded-message-rate": .transient(
            errorCode: .quotaExceeded, message: "Message rate exceeded.", retryAfter: nil, quota: true),
        "internal-bare-500": .transient(errorCode: .httpStatus(500), message: "HTTP 500", retryAfter: nil, quota: false),
        "proxy-502-html": .transient(errorCode: .httpStatus(502), message: "HTTP 502", retryAfter: nil, quota: false),
        "unknown-fcm-code-400": .failed(errorCode: DeliveryErrorCode(rawValue: "SOME_NEW_CODE"), message: "A code FCM may add one day."),
        "unknown-fcm-code-429": .transient(
            errorCode: DeliveryErrorCode(rawValue: "SOME_NEW_CODE"), message: "A code FCM may add one day.", retryAfter: .seconds(7),
            quota: true),
        "unknown-fcm-code-503": .transient(
            errorCode: DeliveryErrorCode(rawValue: "SOME_NEW_CODE"), message: "A code FCM may add one day.", retryAfter: nil, quota: false),
        "unspecified-error-500": .transient(
            errorCode: DeliveryErrorCode(rawValue: "UNSPECIFIED_ERROR"), message: "Internal error encountered.", retryAfter: nil,
            quota: false),
    ]

    static func answer(_ name: String) throws -> FCMAnswer {
        for folder in folders {
            let file = folder.appendingPathComponent(name + ".json")
            if FileManager.default.fileExists(atPath: file.path) {
                return try FCMAnswer(fileContents: Data(contentsOf: file))
            }
        }
        throw MissingAnswerFile(name: name)
    }

    static func classify(_ answer: FCMAnswer) -> SendOutcome {
        SendOutcome.classify(status: answer.status, body: answer.body, retryAfter: answer.header("Retry-After"))
    }

    @Test("every answer file has a row, and every row a file (in one folder only)")
    func tableCoversTheFiles() throws {
        var names: [String] = []
        for folder in Self.folders {
            names += try FileManager.default.contentsOfDirectory(atPath: folder.path)
                .filter { $0.hasSuffix(".json") }
                .map { String($0.dropLast(".json".count)) }
        }
        #expect(names.count == Set(names).count)
        #expect(Set(names) == Set(Self.expected.keys))
    }

    @Test("each FCM answer file classifies as the table says", arguments: expected.keys.sorted())
    func classifies(name: String) throws {
        #expect(Self.classify(try Self.answer(name)) == Self.expected[name])
    }

    /// The emulator's answers built from the request (they name the project or the field) are
    /// the same JSON as the fixtures written from FCM's documentation for the same request.
    @Test("the emulator's refusals of a project and of invalid payloads are the fixtures' bodies")
    func emulatorsBuiltAnswersAreTheFixtures() throws {
        let permissionDenied = try Self.answer("permission-denied")
        let emulatorsPermissionDenied = SendEndpoint.permissionDenied(projectID: "wowa-7")
        #expect(Int(emulatorsPermissionDenied.status.code) == permissionDenied.status)
        #expect(try Self.sameJSON(emulatorsPermissionDenied.body, permissionDenied.body))

        for (request, fixture) in [
            (#"{"message":{"token":"t","data":{"a":12}}}"#, "invalid-argument-data-value"),
            (#"{"message":{"token":"t","data":{"from":"x"}}}"#, "invalid-argument-reserved-data-key"),
        ] {
            let expected = try Self.answer(fixture)
            let violation = try #require(throws: PayloadViolation.self) { try MessageValidator.validate(ByteBuffer(string: request)) }
            let emulators = SendEndpoint.invalidArgument(violation)
            #expect(Int(emulators.status.code) == expected.status, "\(fixture)")
            #expect(try Self.sameJSON(emulators.body, expected.body), "\(fixture): \(String(buffer: emulators.body))")
        }
    }

    static func sameJSON(_ left: ByteBuffer, _ right: ByteBuffer) throws -> Bool {
        func normalized(_ buffer: ByteBuffer) throws -> Data {
            let value = try JSONSerialization.jsonObject(with: Data(buffer: buffer), options: [.fragmentsAllowed])
            return try JSONSerialization.data(withJSONObject: value, options: [.sortedKeys, .fragmentsAllowed])
        }
        return try normalized(left) == normalized(right)
    }
}

struct MissingAnswerFile: Error {
    let name: String
}
