import DeviceRegistry
import FCMTransport
import Foundation
import NIOCore
import NIOFoundationCompat
import Synchronization
import WireFormats

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
    /// High-priority sends' own connection.
    let expressPool: FCMConnectionPool
    let timeout: Duration

    /// Streams the express connection opens before a second one.
    static let expressConcurrency = 64

    /// Sends every message of `sends` for one project with one access token; `onAnswer` gets
    /// each answer (by index in `sends`) as it comes. Returns once all are answered. `express`:
    /// on the high-priority connection.
    func send(
        _ sends: [Send], projectID: String, accessToken: String, express: Bool = false,
        onAnswer: @escaping @Sendable (Int, Answer) -> Void
    ) async {
        let pool = express ? expressPool : pool
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
            .answered(
                SendOutcome.classify(status: response.status, body: response.body, retryAfter: response.retryAfter),
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
        await expressPool.close()
    }
}

/// A job's message serialized once; each send only splices in its target, and for a job with an
/// expiry, the lifetime left at that moment.
struct PreparedMessage: Sendable {
    /// `{"message":{...fields` without the closing braces, cut where the lifetime left goes.
    private let head: [String]
    private let hasFields: Bool
    private let tail: String
    private let expiresAt: Date?

    /// FCM refuses an `android.ttl` over four weeks; web push services cap `TTL` there too.
    static let longestTTL = 28 * 24 * 3600

    /// `messageJSON` is the job's message object as stored (validated by push_check_message).
    /// With `expiresAt`, the message tells every platform when it stops mattering (unless it
    /// says so itself): `android.ttl` and webpush's `TTL` header get the seconds left at each
    /// send, `apns.headers.apns-expiration` the expiry itself, so that a phone that was offline
    /// does not show it late.
    init(messageJSON: String, validateOnly: Bool, expiresAt: Date? = nil) {
        var object = messageJSON.trimmingCharacters(in: .whitespacesAndNewlines)
        var parts: [String]? = nil
        if let expiresAt, let withLifetime = Self.withLifetime(object, expiresAt: expiresAt) {
            object = withLifetime.json
            parts = withLifetime.json.components(separatedBy: withLifetime.marker)
        }
        if object.hasSuffix("}") { object.removeLast() }
        let inner = object.hasPrefix("{") ? String(object.dropFirst()) : object
        hasFields = !inner.trimmingCharacters(in: .whitespaces).isEmpty
        if let parts, parts.count > 1 {
            var cut = parts
            cut[0] = #"{"message":{"# + String(cut[0].dropFirst())
            cut[cut.count - 1] = String(cut[cut.count - 1].dropLast())
            head = cut
            self.expiresAt = expiresAt
        } else {
            head = [#"{"message":{"# + inner]
            self.expiresAt = nil
        }
        tail = validateOnly ? #"},"validate_only":true}"# : "}}"
    }

    /// The message with the expiry's fields added where it has none of its own; the seconds left
    /// are written as `marker`, replaced at each send. Nil when there is nothing to add.
    private static func withLifetime(_ json: String, expiresAt: Date) -> (json: String, marker: String)? {
        guard case .object(var message)? = try? JSONParser.parse(Data(json.utf8)) else { return nil }
        let marker = "@@ttl-\(UUID().uuidString)@@"
        var added = false
        /// Sets `message[object][name]`, or with `headers` `message[object].headers[name]`, unless
        /// the message sets it itself (a header in any case: HTTP's names are case-insensitive; a
        /// field set to null is not set).
        func add(_ value: String, as name: String, in object: String, headers: Bool) {
            var platform = message[object]?.members ?? [:]
            var fields = headers ? platform["headers"]?.members ?? [:] : platform
            let present = headers ? fields.keys.contains { $0.lowercased() == name.lowercased() } : fields.setMembers[name] != nil
            guard !present else { return }
            fields[name] = .string(value)
            if headers { platform["headers"] = .object(fields) } else { platform = fields }
            message[object] = .object(platform)
            added = true
        }
        add("\(marker)s", as: "ttl", in: "android", headers: false)
        let epoch = Int(exactly: expiresAt.timeIntervalSince1970.rounded(.down)) ?? .max
        add("\(epoch)", as: "apns-expiration", in: "apns", headers: true)
        add(marker, as: "TTL", in: "webpush", headers: true)
        guard added else { return nil }
        return (String(decoding: WireJSON.encoded(JSONValue.object(message)), as: UTF8.self), marker)
    }

    /// Whole seconds left until the expiry, at least 0.
    static func secondsLeft(until expiresAt: Date, now: Date) -> Int {
        Int(min(max(expiresAt.timeIntervalSince(now).rounded(.down), 0), Double(longestTTL)))
    }

    func body(target: String, type: TokenType, now: Date = Date()) -> ByteBuffer {
        var buffer = ByteBufferAllocator().buffer(
            capacity: head.reduce(0) { $0 + $1.utf8.count } + target.utf8.count + tail.utf8.count + 32)
        if let expiresAt {
            let left = "\(Self.secondsLeft(until: expiresAt, now: now))"
            for (index, part) in head.enumerated() {
                if index > 0 { buffer.writeString(left) }
                buffer.writeString(part)
            }
        } else {
            buffer.writeString(head[0])
        }
        if hasFields { buffer.writeStaticString(",") }
        buffer.writeStaticString(type == .fid ? #""fid":"# : #""token":"#)
        // Registered tokens hold no whitespace or control characters; quotes and backslashes
        // are the only characters left that JSON needs escaped (looked for in bytes: a
        // Character walk of every token cost 2% of the worker's CPU).
        if target.utf8.contains(where: { $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
            buffer.writeString(WireJSON.quoted(target))
        } else {
            buffer.writeStaticString("\"")
            buffer.writeString(target)
            buffer.writeStaticString("\"")
        }
        buffer.writeString(tail)
        return buffer
    }
}
