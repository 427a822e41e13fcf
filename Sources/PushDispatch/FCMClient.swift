import DeviceRegistry
import Foundation
import NIOCore
import NIOFoundationCompat
import Synchronization

/// `projects.messages.send`: one message per request, a batch of requests at a time, each
/// batch multiplexed over one HTTP/2 connection (FCMConnectionPool), each request with a deadline.
public struct FCMClient: Sendable {
    /// One send of a batch: the job's message to one device.
    struct Send: Sendable {
        let message: PreparedMessage
        let target: String
        let type: TokenType
    }

    /// What became of one send.
    enum Answer: Sendable {
        /// FCM's answer and how long it took, or no answer to a request that was written.
        case answered(SendOutcome, elapsed: Duration?)
        /// The request never reached FCM (no connection, never written, refused unhandled):
        /// sending it again cannot duplicate it. `unreachable`: FCM could not be reached at all,
        /// which the send loop's circuit breaker counts.
        case notSent(reason: String, unreachable: Bool)
    }

    let pool: FCMConnectionPool
    let timeout: Duration

    /// Sends every message of `sends` for one project with one access token; `onAnswer` gets
    /// each answer (by index in `sends`) as it comes. Returns once all are answered.
    func send(_ sends: [Send], projectID: String, accessToken: String, onAnswer: @escaping @Sendable (Int, Answer) -> Void) async {
        let path = "\(pool.endpoint.pathPrefix)/v1/projects/\(projectID)/messages:send"
        let requests = sends.map { FCMRequest(path: path, body: $0.message.body(target: $0.target, type: $0.type)) }
        let refused = Mutex<[Int]>([])
        await pool.execute(requests, authorization: "Bearer \(accessToken)", timeout: timeout) { index, result in
            if result.wasRefused {
                refused.withLock { $0.append(index) }
            } else {
                onAnswer(index, Self.answer(result))
            }
        }
        // Streams the server refused unhandled (above a GOAWAY's last stream id, or reset with
        // REFUSED_STREAM: RFC 9113 §6.8, §8.7), or never written to a connection that went away,
        // go out once more at once, on another connection, instead of waiting a backoff. Refused
        // again, they wait like any request that did not reach FCM.
        let again = refused.withLock { $0 }
        guard !again.isEmpty else { return }
        await pool.execute(again.map { requests[$0] }, authorization: "Bearer \(accessToken)", timeout: timeout) { index, result in
            onAnswer(again[index], Self.answer(result))
        }
    }

    private static func answer(_ result: FCMExchangeResult) -> Answer {
        switch result {
        case .success(let response):
            .answered(SendOutcome.classify(status: response.status, body: response.body, retryAfter: response.retryAfter),
                      elapsed: response.elapsed)
        case .failure(let error) where !error.reachedServer:
            .notSent(reason: error.description, unreachable: error.isUnreachable)
        case .failure(let error):
            // Written, and no answer: FCM may have delivered it. The one ambiguous case.
            .answered(.noAnswer(message: error.description), elapsed: nil)
        }
    }

    func close() async {
        await pool.close()
    }
}

/// A job's message serialized once; each send only splices in its target.
struct PreparedMessage: Sendable {
    /// `{"message":{...fields` without the closing braces, and whether fields precede the target.
    private let head: String
    private let hasFields: Bool
    private let tail: String

    /// `messageJSON` is the job's message object as stored (validated by push_check_message).
    init(messageJSON: String, validateOnly: Bool) {
        var object = messageJSON.trimmingCharacters(in: .whitespacesAndNewlines)
        if object.hasSuffix("}") { object.removeLast() }
        let inner = object.hasPrefix("{") ? String(object.dropFirst()) : object
        hasFields = !inner.trimmingCharacters(in: .whitespaces).isEmpty
        head = #"{"message":{"# + inner
        tail = validateOnly ? #"},"validate_only":true}"# : "}}"
    }

    func body(target: String, type: TokenType) -> ByteBuffer {
        var buffer = ByteBufferAllocator().buffer(capacity: head.utf8.count + target.utf8.count + tail.utf8.count + 16)
        buffer.writeString(head)
        if hasFields { buffer.writeStaticString(",") }
        buffer.writeStaticString(type == .fid ? #""fid":"# : #""token":"#)
        // Registered tokens hold no whitespace or control characters; quotes and backslashes
        // are the only characters left that JSON needs escaped (looked for in bytes: a
        // Character walk of every token cost 2% of the worker's CPU).
        if target.utf8.contains(where: { $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
            buffer.writeString(ServiceAccountAssertion.jsonString(target))
        } else {
            buffer.writeStaticString("\"")
            buffer.writeString(target)
            buffer.writeStaticString("\"")
        }
        buffer.writeString(tail)
        return buffer
    }
}
