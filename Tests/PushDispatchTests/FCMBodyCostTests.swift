import DeviceRegistry
import Foundation
import NIOCore
import Testing
import WireFormats

@testable import PushDispatch

/// What the worker's one JSON fast path saves: the FCM body of each send, written by splicing the
/// target into the job's message (`PreparedMessage`), against the general way, `WireJSON`
/// encoding the whole body. A measurement, not a check: it runs only with JSON_BENCH=1, in a
/// release build (bench/json/run.sh), and prints µs per body.
@Suite("FCM body cost", .enabled(if: ProcessInfo.processInfo.environment["JSON_BENCH"] != nil))
struct FCMBodyCostTests {
    /// A typical notification with data, as stored, and an expiry (the longest path).
    static let message =
        #"{"android": {"priority": "high"}, "data": {"orderId": "981", "url": "https://example.com/o/981"}, "notification": {"body": "Your order has shipped.", "title": "Order 981"}}"#
    static let token = "fcm:" + String(repeating: "APA91bHun4MxP5egoKMwt2KZFBaFUH-1RYqx", count: 4)
    static let calls = 200_000

    static func microseconds(_ work: () -> Int) -> (perCall: Double, checksum: Int) {
        var checksum = 0
        let clock = ContinuousClock()
        let elapsed = clock.measure {
            for _ in 0..<calls { checksum &+= work() }
        }
        let (seconds, attoseconds) = elapsed.components
        return ((Double(seconds) + Double(attoseconds) / 1e18) * 1e6 / Double(calls), checksum)
    }

    @Test func splicedAgainstEncoded() throws {
        let expiry = Date().addingTimeInterval(3600)
        let prepared = PreparedMessage(messageJSON: Self.message, validateOnly: false, expiresAt: expiry)
        let parsed = try #require(try JSONParser.parse(Data(Self.message.utf8)).members)
        let spliced = Self.microseconds { prepared.body(target: Self.token, type: .fcm).readableBytes }
        let encoded = Self.microseconds {
            var message = parsed
            let left = String(PreparedMessage.secondsLeft(until: expiry, now: Date()))
            message["android"] = .object(["priority": .string("high"), "ttl": .string(left + "s")])
            message["apns"] = .object(["headers": .object(["apns-expiration": .string(String(Int(expiry.timeIntervalSince1970)))])])
            message["webpush"] = .object(["headers": .object(["TTL": .string(left)])])
            message["token"] = .string(Self.token)
            return ByteBuffer(data: WireJSON.encoded(JSONValue.object(["message": .object(message)]))).readableBytes
        }
        print(
            String(
                format: "FCM body per send: spliced (PreparedMessage) %.2f µs, encoded (WireJSON) %.2f µs; %d bytes",
                spliced.perCall, encoded.perCall, spliced.checksum / Self.calls))
    }

    /// The general way of reading, on every answer: FCM's success answer through `JSONParser`.
    @Test func answerRead() {
        let answer = ByteBuffer(string: "{\n  \"name\": \"projects/wowa-7/messages/0:1500415314455276%31bd1c9631bd1c96\"\n}\n")
        let read = Self.microseconds {
            if case .sent(let id) = SendOutcome.classify(status: 200, body: answer, retryAfter: nil) { return id.utf8.count }
            return 0
        }
        print(String(format: "FCM body per send: success answer read (JSONParser) %.2f µs", read.perCall))
    }
}
