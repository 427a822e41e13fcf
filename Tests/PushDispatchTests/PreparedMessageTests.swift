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
