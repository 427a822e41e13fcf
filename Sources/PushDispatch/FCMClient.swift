import AsyncHTTPClient
import DeviceRegistry
import Foundation
import Logging
import NIOCore
import NIOFoundationCompat

/// `projects.messages.send` over AsyncHTTPClient: one message per request, many requests in
/// flight, multiplexed over HTTP/2 when the server offers it (TLS + ALPN), each with a deadline.
public struct FCMClient: Sendable {
    let http: HTTPClient
    let baseURL: String
    let timeout: TimeAmount

    init(http: HTTPClient, baseURL: String, timeout: Duration) {
        self.http = http
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.timeout = .nanoseconds(timeout.components.seconds * 1_000_000_000 + timeout.components.attoseconds / 1_000_000_000)
    }

    /// Sends `message` (a prepared `PreparedMessage`) to one device.
    func send(_ message: PreparedMessage, to target: String, type: TokenType, projectID: String, accessToken: String) async -> SendOutcome {
        var request = HTTPClientRequest(url: "\(baseURL)/v1/projects/\(projectID)/messages:send")
        request.method = .POST
        request.headers.add(name: "Authorization", value: "Bearer \(accessToken)")
        request.headers.add(name: "Content-Type", value: "application/json")
        request.body = .bytes(message.body(target: target, type: type))
        do {
            let response = try await http.execute(request, timeout: timeout)
            let body = try await response.body.collect(upTo: 256 * 1024)
            return SendOutcome.classify(status: Int(response.status.code), body: Data(buffer: body),
                                        retryAfter: response.headers.first(name: "Retry-After"))
        } catch {
            // Connection reset, timeout, TLS failure: transient by the protocol's rules.
            return .transient(errorCode: "TRANSPORT", message: "\(error)", retryAfter: nil, quota: false)
        }
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
        let field = type == .fid ? "fid" : "token"
        // Registered tokens hold no whitespace or control characters; quotes and backslashes
        // are the only characters left that JSON needs escaped.
        let quoted = target.contains(where: { $0 == "\"" || $0 == "\\" }) ? ServiceAccountAssertion.jsonString(target) : "\"" + target + "\""
        let text = head + (hasFields ? "," : "") + "\"\(field)\":" + quoted + tail
        return ByteBuffer(string: text)
    }
}
