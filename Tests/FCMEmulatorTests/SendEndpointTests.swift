import FCMEmulator
import Foundation
import NIOHTTP1
import Testing

@Suite("FCM send endpoint")
struct SendEndpointTests {
    static let unauthenticatedMessage =
        "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project."

    @Test("a send with a valid access token is accepted and named")
    func acceptsSend() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            let accessToken = try await session.accessToken(for: fixture)
            let result = try await session.send(accessToken: accessToken, body: EmulatorSession.message(token: "device-1"))
            #expect(result.status == 200)
            let name = try #require(result.json["name"] as? String)
            #expect(name.hasPrefix("projects/\(Fixtures.projectID)/messages/"))
            #expect(name != "projects/\(Fixtures.projectID)/messages/fake_message_id")
        }
    }

    @Test("a missing, unknown, revoked or expired bearer token is 401 UNAUTHENTICATED")
    func unauthenticated() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with(.init(tokenLifetime: .seconds(2))) { session in
            let body = EmulatorSession.message(token: "device-1")
            let missing = try await session.send(accessToken: nil, body: body)
            let unknown = try await session.send(accessToken: "ya29.not-issued", body: body)

            let revokedToken = try await session.accessToken(for: fixture)
            #expect(try await session.send(accessToken: revokedToken, body: body).status == 200)
            session.emulator.revokeAccessTokens()
            let revoked = try await session.send(accessToken: revokedToken, body: body)

            let expiringToken = try await session.accessToken(for: fixture)
            try await Task.sleep(for: .milliseconds(2100))
            let expired = try await session.send(accessToken: expiringToken, body: body)

            for result in [missing, unknown, revoked, expired] {
                #expect(result.status == 401)
                #expect(result.rpcStatus == "UNAUTHENTICATED")
                #expect(result.errorMessage == Self.unauthenticatedMessage)
                #expect(result.fcmErrorCode == nil)
            }
        }
    }

    @Test("a valid token for an account without access to the project is 403 PERMISSION_DENIED")
    func otherProject() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            let accessToken = try await session.accessToken(for: fixture)
            let result = try await session.send(
                project: "someone-elses", accessToken: accessToken, body: EmulatorSession.message(token: "d"))
            #expect(result.status == 403)
            #expect(result.rpcStatus == "PERMISSION_DENIED")
            #expect(result.fcmErrorCode == nil)
        }
    }

    struct ScriptedCase: Sendable, CustomTestStringConvertible {
        var outcome: Outcome
        /// The FCMAnswers file whose status and body the answer is.
        var file: String
        var status: Int
        var rpcStatus: String
        /// nil: no FcmError detail.
        var errorCode: String?
        var retryAfter: String? = nil
        var testDescription: String { file }
    }

    @Test(
        "each scripted outcome answers its FCMAnswers file: FCM's status, body and FcmError",
        arguments: [
            ScriptedCase(outcome: .unregistered, file: "unregistered", status: 404, rpcStatus: "NOT_FOUND", errorCode: "UNREGISTERED"),
            ScriptedCase(
                outcome: .invalidToken, file: "invalid-registration-token", status: 400, rpcStatus: "INVALID_ARGUMENT",
                errorCode: "INVALID_ARGUMENT"),
            ScriptedCase(
                outcome: .senderIDMismatch, file: "sender-id-mismatch", status: 403, rpcStatus: "PERMISSION_DENIED",
                errorCode: "SENDER_ID_MISMATCH"),
            ScriptedCase(
                outcome: .thirdPartyAuthError, file: "third-party-auth-error", status: 401, rpcStatus: "UNAUTHENTICATED",
                errorCode: "THIRD_PARTY_AUTH_ERROR"),
            ScriptedCase(
                outcome: .unavailable(times: 1, retryAfter: 7), file: "unavailable", status: 503, rpcStatus: "UNAVAILABLE",
                errorCode: "UNAVAILABLE", retryAfter: "7"),
            ScriptedCase(
                outcome: .unavailable(times: 1, retryAfter: nil), file: "unavailable", status: 503, rpcStatus: "UNAVAILABLE",
                errorCode: "UNAVAILABLE"),
            ScriptedCase(outcome: .internalError(times: 1), file: "internal", status: 500, rpcStatus: "INTERNAL", errorCode: "INTERNAL"),
            ScriptedCase(
                outcome: .quotaExceeded(times: 1, retryAfter: 60), file: "quota-exceeded", status: 429, rpcStatus: "RESOURCE_EXHAUSTED",
                errorCode: "QUOTA_EXCEEDED", retryAfter: "60"),
            // The project's send quota, as FCM answers it in production: no FcmError at all.
            ScriptedCase(
                outcome: .rateLimitExceeded(times: 1, retryAfter: nil), file: "rate-limit-exceeded", status: 429,
                rpcStatus: "RESOURCE_EXHAUSTED", errorCode: nil),
            ScriptedCase(
                outcome: .unauthenticated(times: 1), file: "unauthenticated", status: 401, rpcStatus: "UNAUTHENTICATED", errorCode: nil),
        ]
    )
    func scriptedOutcome(_ scripted: ScriptedCase) async throws {
        let fixture = try Fixtures.primary()
        let file = try FCMAnswerFiles.emulators(scripted.file)
        try await EmulatorSession.with { session in
            let accessToken = try await session.accessToken(for: fixture)
            session.emulator.script(token: "scripted-device", scripted.outcome)
            let result = try await session.send(accessToken: accessToken, body: EmulatorSession.message(token: "scripted-device"))
            #expect(result.status == scripted.status)
            #expect(result.status == file.status)
            #expect(try FCMAnswerFiles.sameJSON(result.body, String(buffer: file.body)))
            #expect(result.error["code"] as? Int == scripted.status)
            #expect(result.rpcStatus == scripted.rpcStatus)
            #expect(result.fcmErrorCode == scripted.errorCode)
            #expect(result.headers.first(name: "Retry-After") == scripted.retryAfter)
            #expect(result.headers.first(name: "Content-Type") == file.header("Content-Type"))
            if scripted.outcome == .invalidToken {
                #expect(result.violatedFields == ["message.token"])
            }
            #expect(session.emulator.stats(for: "scripted-device") == DeviceStats(rejected: 1))
        }
    }

    @Test("every FCMAnswers file is one the emulator reads: none is left unused")
    func everyAnswerFileIsUsed() throws {
        let names = try FCMAnswerFiles.emulatorFileNames()
        #expect(
            names == [
                "insufficient-scopes", "internal", "invalid-registration-fid", "invalid-registration-token", "quota-exceeded",
                "rate-limit-exceeded", "sender-id-mismatch", "third-party-auth-error", "unauthenticated", "unavailable", "unregistered",
            ])
    }

    @Test("bare_<status> answers that status with {} and no error details, as a proxy does")
    func bareErrors() async throws {
        #expect(Outcome(name: "bare_400") == .bareError(status: 400))
        #expect(Outcome(name: "bare_503") == .bareError(status: 503))
        for refused in ["bare_200", "bare_600", "bare_", "bare_4o4"] { #expect(Outcome(name: refused) == nil, "\(refused)") }
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            let accessToken = try await session.accessToken(for: fixture)
            for status in [400, 403, 404] {
                session.emulator.script(token: "bare-\(status)", .bareError(status: status))
                let result = try await session.send(accessToken: accessToken, body: EmulatorSession.message(token: "bare-\(status)"))
                #expect(result.status == status)
                #expect(result.body == "{}")
                #expect(result.fcmErrorCode == nil && result.rpcStatus == nil)
            }
            #expect(session.emulator.stats.rejected == 3)
        }
    }

    @Test("transient outcomes fail the first N attempts, then deliver")
    func transientThenSuccess() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            let accessToken = try await session.accessToken(for: fixture)
            session.emulator.script(token: "flaky", .unavailable(times: 2, retryAfter: nil))
            let body = EmulatorSession.message(token: "flaky")
            let statuses = try await [
                session.send(accessToken: accessToken, body: body).status,
                session.send(accessToken: accessToken, body: body).status,
                session.send(accessToken: accessToken, body: body).status,
            ]
            #expect(statuses == [503, 503, 200])
            #expect(session.emulator.stats(for: "flaky") == DeviceStats(accepted: 1, rejected: 2))
        }
    }

    @Test("a slow outcome answers success after the delay")
    func slow() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            let accessToken = try await session.accessToken(for: fixture)
            session.emulator.script(token: "sluggish", .slow(.milliseconds(300)))
            let started = ContinuousClock.now
            let result = try await session.send(accessToken: accessToken, body: EmulatorSession.message(token: "sluggish"))
            #expect(result.status == 200)
            #expect(ContinuousClock.now - started >= .milliseconds(300))
        }
    }

    @Test("prefix rules script every token that starts with the prefix")
    func prefixRules() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with(.init(prefixRules: PrefixRule.standard)) { session in
            let accessToken = try await session.accessToken(for: fixture)
            session.emulator.script(tokenPrefix: "gone-", .unregistered)
            let codes = try await [
                session.send(accessToken: accessToken, body: EmulatorSession.message(token: "unregistered-1")).fcmErrorCode,
                session.send(accessToken: accessToken, body: EmulatorSession.message(token: "invalid-1")).fcmErrorCode,
                session.send(accessToken: accessToken, body: EmulatorSession.message(token: "mismatch-1")).fcmErrorCode,
                session.send(accessToken: accessToken, body: EmulatorSession.message(token: "unavailable-1")).fcmErrorCode,
                session.send(accessToken: accessToken, body: EmulatorSession.message(token: "unavailable-1")).fcmErrorCode,
                session.send(accessToken: accessToken, body: EmulatorSession.message(token: "gone-1")).fcmErrorCode,
                session.send(accessToken: accessToken, body: EmulatorSession.message(token: "ordinary")).fcmErrorCode,
            ]
            #expect(codes == ["UNREGISTERED", "INVALID_ARGUMENT", "SENDER_ID_MISMATCH", "UNAVAILABLE", nil, "UNREGISTERED", nil])
        }
    }

    @Test(
        "invalid messages are 400 INVALID_ARGUMENT with a field violation, and an FcmError when FCM itself (not the API front end) refused them",
        arguments: [
            ("token and topic", #"{"message":{"token":"a","topic":"news"}}"#, "message", false),
            ("no target", #"{"message":{"data":{"k":"v"}}}"#, "message", true),
            ("unknown message field", #"{"message":{"token":"a","priority":"high"}}"#, "message", false),
            ("unknown top-level field", #"{"message":{"token":"a"},"dry_run":true}"#, "", false),
            ("non-string data value", #"{"message":{"token":"a","data":{"count":1}}}"#, "message.data[0].value", false),
            ("null data value", #"{"message":{"token":"a","data":{"k":null}}}"#, "message.data[0].value", false),
            ("reserved data key from", #"{"message":{"token":"a","data":{"from":"me"}}}"#, "message.data[0].key", true),
            ("reserved data key google.*", #"{"message":{"token":"a","data":{"a":"1","google.x":"y"}}}"#, "message.data[1].key", true),
            ("reserved data key gcm*", #"{"message":{"token":"a","data":{"gcm.n":"y"}}}"#, "message.data[0].key", true),
            ("unknown notification field", #"{"message":{"token":"a","notification":{"titel":"x"}}}"#, "message.notification", false),
            ("non-object android", #"{"message":{"token":"a","android":"high"}}"#, "message.android", false),
            ("unknown android field", #"{"message":{"token":"a","android":{"priority":"high","prio":"x"}}}"#, "message.android", false),
            ("unknown apns field", #"{"message":{"token":"a","apns":{"aps":{}}}}"#, "message.apns", false),
            ("android.ttl without its unit", #"{"message":{"token":"a","android":{"ttl":"3600"}}}"#, "message.android.ttl", false),
            ("android.ttl as a number", #"{"message":{"token":"a","android":{"ttl":3600}}}"#, "message.android.ttl", false),
            (
                "apns header not a string", #"{"message":{"token":"a","apns":{"headers":{"apns-expiration":1800000000}}}}"#,
                "message.apns.headers", false
            ),
            (
                "webpush header not a string", #"{"message":{"token":"a","webpush":{"headers":{"TTL":60}}}}"#, "message.webpush.headers",
                false
            ),
            ("unknown fcm_options field", #"{"message":{"token":"a","fcmOptions":{"label":"x"}}}"#, "message.fcm_options", false),
            ("not JSON", "message=hello", "", false),
            ("empty token", #"{"message":{"token":""}}"#, "message.token", true),
            ("empty fid", #"{"message":{"fid":""}}"#, "message.fid", true),
        ]
    )
    func invalidMessage(case name: String, body: String, field: String, fromFCM: Bool) async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            let accessToken = try await session.accessToken(for: fixture)
            let result = try await session.send(accessToken: accessToken, body: body)
            #expect(result.status == 400, "\(name)")
            #expect(result.rpcStatus == "INVALID_ARGUMENT", "\(name)")
            #expect(result.fcmErrorCode == (fromFCM ? "INVALID_ARGUMENT" : nil), "\(name)")
            #expect(result.violatedFields == [field], "\(name)")
            #expect(session.emulator.stats.accepted == 0)
        }
    }

    @Test("a scripted invalid installation id names message.fid, a token message.token")
    func invalidTargetsNameTheirField() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            let accessToken = try await session.accessToken(for: fixture)
            session.emulator.script(token: "bad-1", .invalidToken)
            for field in ["fid", "token"] {
                let result = try await session.send(accessToken: accessToken, body: #"{"message":{"\#(field)":"bad-1"}}"#)
                #expect(result.status == 400 && result.fcmErrorCode == "INVALID_ARGUMENT")
                #expect(result.violatedFields == ["message.\(field)"])
            }
        }
    }

    @Test("fields may be named in lowerCamelCase as in every Google JSON API, and the platform objects' known fields pass")
    func camelCaseAndPlatformFields() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            let accessToken = try await session.accessToken(for: fixture)
            let bodies = [
                #"{"validateOnly":false,"message":{"token":"camel","fcmOptions":{"analyticsLabel":"x"},"notification":{"title":"t"}}}"#,
                #"{"message":{"token":"snake","fcm_options":{"analytics_label":"x"},"android":{"collapse_key":"c","priority":"high","ttl":"60.5s","restrictedPackageName":"p","directBootOk":true,"notification":{"channel_id":"x"}},"apns":{"headers":{"apns-priority":"10"},"payload":{"aps":{"badge":1}}},"webpush":{"headers":{"TTL":"60"},"data":{"k":"v"},"notification":{"title":"t"}}}}"#,
                // A member set to null is one left out, as protobuf's JSON mapping reads it.
                #"{"message":{"token":"nulls","notification":{"title":"t","image":null},"data":null,"android":{"ttl":null},"apns":null,"webpush":{"headers":null}}}"#,
            ]
            for body in bodies {
                let result = try await session.send(accessToken: accessToken, body: body)
                #expect(result.status == 200, "\(body): \(result.errorMessage ?? "")")
            }
            #expect(session.emulator.stats.accepted == 3)
        }
    }

    @Test("a payload over 4096 bytes of keys and values is too big; one of 4096 is accepted, each platform counted alone")
    func messageSize() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            let accessToken = try await session.accessToken(for: fixture)
            // The key "blob" is 4 bytes: 4 + 4093 is one byte over.
            let tooBig = EmulatorSession.message(token: "big", data: #"{"blob":"\#(String(repeating: "x", count: 4093))"}"#)
            let result = try await session.send(accessToken: accessToken, body: tooBig)
            #expect(result.status == 400)
            // fcm-protocol.md: a message too big is a 400 without an FcmError.
            #expect(result.fcmErrorCode == nil)
            #expect(result.errorMessage?.hasPrefix("Message is too big") == true)
            let fits = EmulatorSession.message(token: "big", data: #"{"blob":"\#(String(repeating: "x", count: 4092))"}"#)
            #expect(try await session.send(accessToken: accessToken, body: fits).status == 200)
            // The JSON around the keys and values is not payload: 400 pairs of 10 bytes, 6,400 as JSON.
            let manyKeys = (0..<400).map { #""k\#(String(format: "%03d", $0))":"vvvvvv""# }.joined(separator: ",")
            #expect(
                try await session.send(accessToken: accessToken, body: EmulatorSession.message(token: "big", data: "{\(manyKeys)}")).status
                    == 200)
            // A device gets its own platform's block: a body written for Android and again for APNs.
            let body = String(repeating: "b", count: 1400)
            let perPlatform = #"""
                {"message":{"token":"big","notification":{"title":"t","body":"\#(body)"},\#
                "android":{"notification":{"body":"\#(body)"}},"apns":{"payload":{"aps":{"alert":{"body":"\#(body)"}}}}}}
                """#
            #expect(try await session.send(accessToken: accessToken, body: perPlatform).status == 200)
            // A member set to null is left out, and weighs nothing.
            let withNull = #"{"message":{"token":"big","notification":{"title":"\#(String(repeating: "t", count: 4091))","image":null}}}"#
            #expect(try await session.send(accessToken: accessToken, body: withNull).status == 200)
        }
    }

    @Test("validate_only answers a fake message id and delivers nothing")
    func validateOnly() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            let accessToken = try await session.accessToken(for: fixture)
            let result = try await session.send(
                accessToken: accessToken,
                body: #"{"validate_only":true,"message":{"token":"dry","notification":{"title":"t","body":"b"}}}"#
            )
            #expect(result.status == 200)
            #expect(result.json["name"] as? String == "projects/\(Fixtures.projectID)/messages/fake_message_id")
            #expect(session.emulator.stats(for: "dry") == DeviceStats(validateOnly: 1))
            #expect(session.emulator.stats.accepted == 0)
            #expect(session.emulator.lastAcceptedMessage(for: "dry") == nil)
        }
    }

    @Test("HTTP/2 is negotiated and 200 concurrent sends all succeed")
    func concurrentHTTP2() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            let accessToken = try await session.accessToken(for: fixture)
            let results = try await withThrowingTaskGroup(of: HTTPResult.self) { group in
                for index in 0..<200 {
                    group.addTask {
                        try await session.send(accessToken: accessToken, body: EmulatorSession.message(token: "device-\(index)"))
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(results.count == 200)
            #expect(results.allSatisfy { $0.status == 200 })
            #expect(results.allSatisfy { $0.version == .http2 })
            #expect(Set(results.compactMap { $0.json["name"] as? String }).count == 200)
            let stats = session.emulator.stats
            #expect(stats.accepted == 200)
            #expect((0..<200).allSatisfy { stats.devices["device-\($0)"] == DeviceStats(accepted: 1) })
        }
    }

    @Test("stats count accepted sends per token and keep the last message")
    func statsPerToken() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with(.init(retainedMessageLimit: 2)) { session in
            let accessToken = try await session.accessToken(for: fixture)
            for data in [#"{"n":"1"}"#, #"{"n":"2"}"#] {
                #expect(
                    try await session.send(accessToken: accessToken, body: EmulatorSession.message(token: "twice", data: data)).status
                        == 200)
            }
            #expect(try await session.send(accessToken: accessToken, body: EmulatorSession.message(token: "once")).status == 200)
            session.emulator.script(token: "never", .unregistered)
            #expect(try await session.send(accessToken: accessToken, body: EmulatorSession.message(token: "never")).status == 404)

            #expect(session.emulator.stats(for: "twice") == DeviceStats(accepted: 2))
            #expect(session.emulator.stats(for: "once") == DeviceStats(accepted: 1))
            #expect(session.emulator.stats(for: "never") == DeviceStats(rejected: 1))
            #expect(session.emulator.stats.accepted == 3)
            // Accepted sends beyond the distinct tokens are duplicates.
            #expect(session.emulator.stats.distinctAcceptedTokens == 2)
            let summary = try await session.request(.GET, "/emulator/stats?devices=false")
            #expect(summary.json["accepted"] as? Int == 3)
            #expect(summary.json["distinct_accepted_tokens"] as? Int == 2)
            let last = try #require(session.emulator.lastAcceptedMessage(for: "twice"))
            #expect(last.requestBody.contains(#"{"n":"2"}"#))
            // Only the two most recent bodies are retained.
            #expect(session.emulator.recentAcceptedMessages.map(\.deviceToken) == ["twice", "once"])

            session.emulator.reset()
            #expect(session.emulator.stats == EmulatorStats())
            #expect(try await session.send(accessToken: accessToken, body: EmulatorSession.message(token: "once")).status == 401)
        }
    }
}
