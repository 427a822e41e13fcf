import DeviceRegistry
import Foundation
import NIOCore
import Testing

@testable import PushDispatch

@Suite("A job's message with each device's target spliced in")
struct PreparedMessageTests {
    static func body(_ message: String, target: String, type: TokenType = .fcm, validateOnly: Bool = false) throws -> [String: Any] {
        let buffer = PreparedMessage(messageJSON: message, validateOnly: validateOnly).body(target: target, type: type)
        return try #require(try JSONSerialization.jsonObject(with: Data(String(buffer: buffer).utf8)) as? [String: Any])
    }

    @Test func targetJoinsTheMessagesFields() throws {
        let sent = try Self.body(#" {"data":{"k":"v"},"android":{"priority":"high"}} "#, target: "tok-1")
        let message = try #require(sent["message"] as? [String: Any])
        #expect(message["token"] as? String == "tok-1")
        #expect((message["data"] as? [String: String]) == ["k": "v"])
        #expect(sent["validate_only"] == nil)

        let bare = try Self.body("{}", target: "fid-1", type: .fid, validateOnly: true)
        #expect((bare["message"] as? [String: String]) == ["fid": "fid-1"])
        #expect(bare["validate_only"] as? Bool == true)
    }

    @Test(arguments: [#"quo"te"#, #"back\slash"#, "é-ünïcode-😀", "plain"])
    func targetsAreValidJSONStrings(_ target: String) throws {
        let message = try #require(try Self.body(#"{"notification":{"title":"t"}}"#, target: target)["message"] as? [String: Any])
        #expect(message["token"] as? String == target)
    }
}

@Suite("A job's expiry passed on to FCM")
struct PreparedMessageExpiryTests {
    static let expiry = Date(timeIntervalSince1970: 1_800_000_000)

    static func message(_ json: String, secondsBefore: Double) throws -> [String: Any] {
        let buffer = PreparedMessage(messageJSON: json, validateOnly: false, expiresAt: expiry)
            .body(target: "tok-1", type: .fcm, now: expiry.addingTimeInterval(-secondsBefore))
        let body = try #require(try JSONSerialization.jsonObject(with: Data(String(buffer: buffer).utf8)) as? [String: Any])
        return try #require(body["message"] as? [String: Any])
    }

    @Test func eachPlatformIsToldTheLifetimeLeftAtTheSend() throws {
        let json = #"{"notification":{"title":"Sale"},"android":{"priority":"high"}}"#
        let early = try Self.message(json, secondsBefore: 3600.7)
        let android = try #require(early["android"] as? [String: Any])
        #expect(android["ttl"] as? String == "3600s" && android["priority"] as? String == "high")
        #expect((early["apns"] as? [String: Any])?["headers"] as? [String: String] == ["apns-expiration": "1800000000"])
        #expect((early["webpush"] as? [String: Any])?["headers"] as? [String: String] == ["TTL": "3600"])
        #expect(early["token"] as? String == "tok-1")
        #expect((early["notification"] as? [String: String]) == ["title": "Sale"])
        // The same prepared message, later: less left.
        let late = try Self.message(json, secondsBefore: 12)
        #expect((late["android"] as? [String: Any])?["ttl"] as? String == "12s")
        #expect((late["webpush"] as? [String: Any])?["headers"] as? [String: String] == ["TTL": "12"])
        // Never more than FCM takes.
        let far = try Self.message(json, secondsBefore: 90 * 86400)
        #expect((far["android"] as? [String: Any])?["ttl"] as? String == "2419200s")
    }

    @Test func whatTheMessageSetsItselfIsKept() throws {
        let json =
            #"{"android":{"ttl":"60s"},"apns":{"headers":{"APNS-Expiration":"0"}},"webpush":{"headers":{"ttl":"30","Urgency":"high"}}}"#
        let message = try Self.message(json, secondsBefore: 3600)
        #expect((message["android"] as? [String: Any])?["ttl"] as? String == "60s")
        #expect((message["apns"] as? [String: Any])?["headers"] as? [String: String] == ["APNS-Expiration": "0"])
        #expect((message["webpush"] as? [String: Any])?["headers"] as? [String: String] == ["ttl": "30", "Urgency": "high"])
        // Nothing to add: the stored message goes out as it is.
        let plain = PreparedMessage(messageJSON: json, validateOnly: false, expiresAt: Self.expiry).body(target: "t", type: .fcm)
        #expect(String(buffer: plain).hasPrefix(#"{"message":{"android":{"ttl":"60s"}"#))
    }

    /// A member set to null is one left out (protobuf's JSON mapping): the lifetime goes there.
    @Test func aLifetimeSetToNullIsNotTheMessagesOwn() throws {
        let message = try Self.message(#"{"android":{"ttl":null,"priority":"high"},"apns":null}"#, secondsBefore: 60)
        #expect((message["android"] as? [String: Any])?["ttl"] as? String == "60s")
        #expect((message["apns"] as? [String: Any])?["headers"] as? [String: String] == ["apns-expiration": "1800000000"])
    }

    @Test func withoutAnExpiryNothingIsAdded() throws {
        let buffer = PreparedMessage(messageJSON: #"{"data":{"k":"v"}}"#, validateOnly: false).body(target: "t", type: .fcm)
        #expect(String(buffer: buffer) == #"{"message":{"data":{"k":"v"},"token":"t"}}"#)
    }
}
