import NIOCore
import Testing

@testable import PushDispatch

/// The message id kept from FCM's success answer: read without a JSON parser when the answer
/// has FCM's plain shape, by the parser otherwise, the same either way.
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
    func fcmsPlainAnswerIsReadWithoutTheParser(body: String) {
        #expect(SendOutcome.plainMessageName(ByteBuffer(string: body)) == "projects/wowa-7/messages/0:1500415314455276%31bd1c9631bd1c96")
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
    func anyOtherShapeGoesToTheParser(body: String, id: String) {
        if body.contains("\\") || body.contains("extra") || body.contains("\u{1}") || body.isEmpty {
            #expect(SendOutcome.plainMessageName(ByteBuffer(string: body)) == nil)
        }
        #expect(messageID(body) == .sent(messageID: id))
    }
}
