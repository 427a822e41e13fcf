import DeviceRegistry
import Foundation
import NIOCore
import NIOFoundationCompat

/// `projects.messages.send`: one message per request, a batch of requests at a time, each
/// batch multiplexed over one HTTP/2 connection (FCMConnectionPool), each request with a deadline.
public struct FCMClient: Sendable {
    /// One send of a batch: the job's message to one device.
    struct Send: Sendable {
        let message: PreparedMessage
        let target: String
        let type: TokenType
    }

    /// What FCM's answer means, and how long it took when there was one.
    struct Answer: Sendable {
        let outcome: SendOutcome
        let elapsed: Duration?
    }

    let pool: FCMConnectionPool
    let timeout: Duration

    /// Sends every message of `sends` for one project with one access token; answers in order.
    func send(_ sends: [Send], projectID: String, accessToken: String) async -> [Answer] {
        let path = "\(pool.endpoint.pathPrefix)/v1/projects/\(projectID)/messages:send"
        let requests = sends.map { FCMRequest(path: path, body: $0.message.body(target: $0.target, type: $0.type)) }
        var results = await pool.execute(requests, authorization: "Bearer \(accessToken)", timeout: timeout)
        // Streams the server refused unhandled (above a GOAWAY's last stream id, or reset with
        // REFUSED_STREAM: RFC 9113 §6.8, §8.7) go out once more at once, on another connection,
        // instead of waiting a backoff and spending an attempt. Refused again, they are transient
        // failures like any other.
        let refused = results.indices.filter { results[$0].wasRefused }
        if !refused.isEmpty {
            let resent = await pool.execute(refused.map { requests[$0] }, authorization: "Bearer \(accessToken)", timeout: timeout)
            for (index, result) in zip(refused, resent) { results[index] = result }
        }
        return results.map { result in
            switch result {
            case .success(let response):
                Answer(outcome: SendOutcome.classify(status: response.status, body: response.body, retryAfter: response.retryAfter),
                       elapsed: response.elapsed)
            case .failure(let error):
                // Connection reset, timeout, TLS failure: transient by the protocol's rules.
                Answer(outcome: .transient(errorCode: "TRANSPORT", message: error.description, retryAfter: nil, quota: false), elapsed: nil)
            }
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
