import Hummingbird

/// An error answered with the service's one envelope:
/// `{"code": "VALIDATION_FAILED", "status": "BAD_REQUEST", "message": "..."}`.
/// `code` is a stable machine word; `message` is for people and never holds a secret.
public struct APIError: Error, Sendable, Equatable {
    public let status: HTTPResponse.Status
    public let code: String
    public let message: String
    /// Whole seconds to wait before trying again, sent as `Retry-After`.
    public let retryAfterSeconds: Int?

    public init(_ status: HTTPResponse.Status, code: String, _ message: String, retryAfterSeconds: Int? = nil) {
        self.status = status
        self.code = code
        self.message = message
        self.retryAfterSeconds = retryAfterSeconds
    }

    public static func validation(_ message: String) -> APIError {
        APIError(.badRequest, code: "VALIDATION_FAILED", message)
    }
    /// `member` holds U+0000, which PostgreSQL cannot store: refused naming it, before the
    /// database would in its own words.
    public static func holdsNUL(_ member: String) -> APIError {
        validation("\(member) must not contain NUL characters (\\u0000)")
    }
    public static func malformedJSON(_ message: String) -> APIError {
        APIError(.badRequest, code: "MALFORMED_JSON", message)
    }
    public static func unauthenticated(_ message: String) -> APIError {
        APIError(.unauthorized, code: "UNAUTHENTICATED", message)
    }
    public static func forbidden(_ message: String) -> APIError {
        APIError(.forbidden, code: "FORBIDDEN", message)
    }
    public static func notFound(_ message: String) -> APIError {
        APIError(.notFound, code: "NOT_FOUND", message)
    }
    /// Over a rate limit; `retryAfter` is rounded up to whole seconds, at least one.
    public static func tooManyRequests(_ message: String, retryAfter: Duration) -> APIError {
        let seconds = retryAfter.components.seconds + (retryAfter.components.attoseconds > 0 ? 1 : 0)
        return APIError(.tooManyRequests, code: "RATE_LIMITED", message, retryAfterSeconds: Int(max(1, seconds)))
    }
    public static let databaseUnavailable = APIError(
        .serviceUnavailable, code: "DATABASE_UNAVAILABLE", "the database is unavailable; retry later")
    /// A request that arrived after the server began its graceful shutdown.
    public static let shuttingDown = APIError(
        .serviceUnavailable, code: "SHUTTING_DOWN", "push-api is shutting down; retry")
    public static let `internal` = APIError(
        .internalServerError, code: "INTERNAL", "an internal error occurred")

    /// The HTTP status as an upper-case word, e.g. `BAD_REQUEST`.
    var statusName: String {
        switch status {
        case .contentTooLarge: return "PAYLOAD_TOO_LARGE"
        default:
            return status.reasonPhrase.uppercased()
                .map { $0.isLetter || $0.isNumber ? $0 : "_" }
                .reduce(into: "") { $0.append($1) }
        }
    }

    func response() -> Response {
        var headers: HTTPFields = [.contentType: "application/json; charset=utf-8"]
        if status == .unauthorized { headers[.wwwAuthenticate] = "Bearer" }
        if let retryAfterSeconds { headers[.retryAfter] = String(retryAfterSeconds) }
        return Response(
            status: status, headers: headers,
            body: .init(byteBuffer: JSONBody.encode(Envelope(code: code, status: statusName, message: message))))
    }

    private struct Envelope: Encodable {
        let code: String
        let status: String
        let message: String
    }
}
