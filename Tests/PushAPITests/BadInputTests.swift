import Foundation
import Hummingbird
import HummingbirdTesting
import NIOCore
import PushAPI
import TestSupport
import Testing

@Suite("Bad input gets the envelope and changes nothing")
struct BadInputTests {
    struct Case: Sendable, CustomTestStringConvertible {
        let json: String
        let contentType: String
        let status: Int
        let code: String
        let message: String?
        var testDescription: String { "\(status) \(code): \(json.prefix(40))" }
    }

    static let cases: [Case] = [
        Case(
            json: "{not json", contentType: "application/json", status: 400, code: "MALFORMED_JSON",
            message: "the body is not valid JSON: unexpected 'n' at line 1, column 2"),
        Case(
            json: "[1,2]", contentType: "application/json", status: 400, code: "VALIDATION_FAILED",
            message: "the body must be a JSON object"),
        // Which token was meant? Neither is taken (jsonb would keep the last).
        Case(
            json: #"{"token":"tok-a","token":"tok-b","platform":"ios"}"#, contentType: "application/json", status: 400,
            code: "VALIDATION_FAILED", message: #"the body is ambiguous: the member "token" given twice, at line 1, column 18"#),
        Case(
            json: #"{"token":"t","platform":"ios"}"#, contentType: "text/plain", status: 415, code: "UNSUPPORTED_MEDIA_TYPE",
            message: "the body must be application/json"),
        Case(
            json: #"{"platform":"ios"}"#, contentType: "application/json", status: 400, code: "VALIDATION_FAILED",
            message: "token is required"),
        Case(
            json: #"{"token":"","platform":"ios"}"#, contentType: "application/json", status: 400, code: "VALIDATION_FAILED",
            message: "token must be 1 to 500 characters"),
        Case(
            json: "{\"token\":\"\(String(repeating: "x", count: 501))\",\"platform\":\"ios\"}", contentType: "application/json",
            status: 400, code: "VALIDATION_FAILED", message: "token must be 1 to 500 characters"),
        Case(
            json: #"{"token":"a b","platform":"ios"}"#, contentType: "application/json", status: 400, code: "VALIDATION_FAILED",
            message: "token must not contain whitespace or control characters"),
        Case(
            json: #"{"token":"a\u0007b","platform":"ios"}"#, contentType: "application/json", status: 400, code: "VALIDATION_FAILED",
            message: "token must not contain whitespace or control characters"),
        Case(
            json: #"{"token":"tok","platform":"symbian"}"#, contentType: "application/json", status: 400, code: "VALIDATION_FAILED",
            message: "platform must be one of ios, android, web"),
        Case(
            json: #"{"token":"tok","platform":7}"#, contentType: "application/json", status: 400, code: "VALIDATION_FAILED",
            message: "platform must be a string"),
        Case(
            json: #"{"token":12345,"platform":"ios"}"#, contentType: "application/json", status: 400, code: "VALIDATION_FAILED",
            message: "token must be a string"),
        Case(
            json: #"{"token":"tok","platform":"ios","tokenType":"apns"}"#, contentType: "application/json", status: 400,
            code: "VALIDATION_FAILED", message: "tokenType must be one of fcm, fid"),
        // A misspelt deviceId would leave the one-device-per-id replacement silently off.
        Case(
            json: #"{"token":"tok","platform":"ios","deviceID":"phone-1"}"#, contentType: "application/json", status: 400,
            code: "VALIDATION_FAILED",
            message: #"unknown field "deviceID"; expected one of token, platform, deviceId, tokenType"#),
        Case(
            json: #"{"token":"tok","platform":"ios","zz":1,"device_id":"p","tokenType":"fcm"}"#, contentType: "application/json",
            status: 400,
            code: "VALIDATION_FAILED", message: #"unknown field "device_id"; expected one of token, platform, deviceId, tokenType"#),
        Case(
            json: "{\"token\":\"tok\",\"platform\":\"ios\",\"pad\":\"\(String(repeating: "p", count: 17_000))\"}",
            contentType: "application/json", status: 413, code: "PAYLOAD_TOO_LARGE", message: "the body must be at most 16384 bytes"),
    ]

    @Test(arguments: cases)
    func registrationRefuses(_ bad: Case) async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test { client in
            let response = try await client.send(
                .post, "/push/devices", token: fixture.token(), json: bad.json, contentType: bad.contentType)
            #expect(Int(response.status.code) == bad.status)
            #expect(response.json["code"] as? String == bad.code)
            #expect((response.json["status"] as? String)?.isEmpty == false)
            if let message = bad.message { #expect(response.json["message"] as? String == message) }
            let list = try await client.send(.get, "/push/devices", token: fixture.token())
            #expect((list.json["devices"] as? [Any])?.isEmpty == true)
        }
        #expect(try await fixture.database.text("SELECT count(*)::text FROM push_devices") == "0")
    }

    @Test func missingContentTypeIs415() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test { client in
            let response = try await client.execute(
                uri: "/push/devices", method: .post, headers: [.authorization: "Bearer \(fixture.token())"],
                body: ByteBuffer(string: #"{"token":"t","platform":"ios"}"#))
            #expect(response.status == .unsupportedMediaType)
        }
    }

    /// One spelling per id: `+1` and `01` are not device 1.
    @Test(arguments: ["abc", "-1", "0", "1.5", "99999999999999999999999", "+1", "01"])
    func nonNumericDeviceIDIs400(_ id: String) async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test { client in
            let response = try await client.send(.delete, "/push/devices/\(id)", token: fixture.token())
            #expect(response.status == .badRequest)
            #expect(response.json["message"] as? String == "device id must be a positive integer")
        }
    }

    @Test func unknownRoutesAndMethodsUseTheEnvelope() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test { client in
            let missing = try await client.execute(uri: "/nowhere", method: .get)
            #expect(missing.status == .notFound && missing.json["code"] as? String == "NOT_FOUND")
            #expect(missing.json["status"] as? String == "NOT_FOUND")
        }
    }
}
