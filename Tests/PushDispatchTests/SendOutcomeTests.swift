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
        #expect(messageID(body) == (id.isEmpty ? .sentUnreadable(body: body) : .sent(messageID: id)))
    }

    @Test func anyTwoHundredIsAcceptedAndOneNamingNoMessageIsCountedApart() {
        #expect(SendOutcome.classify(status: 201, body: ByteBuffer(string: #"{"name":"projects/p/messages/7"}"#), retryAfter: nil)
                    == .sent(messageID: "7"))
        #expect(SendOutcome.classify(status: 204, body: ByteBuffer(), retryAfter: nil) == .sentUnreadable(body: ""))
        #expect(SendOutcome.classify(status: 200, body: ByteBuffer(string: "<html>ok</html>"), retryAfter: nil)
                    == .sentUnreadable(body: "<html>ok</html>"))
    }

    private static func error(_ status: Int, _ code: String) -> ByteBuffer {
        ByteBuffer(string: #"{"error":{"code":\#(status),"message":"m","status":"S","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"\#(code)"}]}}"#)
    }

    @Test func apnsAuthErrorIsThirdPartyAuthAndUnknownCodesAreReadByStatus() {
        #expect(SendOutcome.classify(status: 401, body: Self.error(401, "APNS_AUTH_ERROR"), retryAfter: nil) == .thirdPartyAuth(message: "m"))
        #expect(SendOutcome.classify(status: 503, body: Self.error(503, "SOMETHING_NEW"), retryAfter: "3")
                    == .transient(errorCode: "SOMETHING_NEW", message: "m", retryAfter: .seconds(3), quota: false))
        #expect(SendOutcome.classify(status: 429, body: Self.error(429, "SOMETHING_NEW"), retryAfter: nil)
                    == .transient(errorCode: "SOMETHING_NEW", message: "m", retryAfter: nil, quota: true))
        #expect(SendOutcome.classify(status: 400, body: Self.error(400, "SOMETHING_NEW"), retryAfter: nil)
                    == .failed(errorCode: "SOMETHING_NEW", message: "m"))
    }
}
