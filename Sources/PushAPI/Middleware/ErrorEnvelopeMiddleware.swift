import DeviceRegistry
import Hummingbird
import Logging
import ServiceSupport

/// Turns every error into the envelope, so no client ever sees Hummingbird's plain-text
/// errors or a stack of internals. Database connection failures become 503.
struct ErrorEnvelopeMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as APIError {
            return error.response()
        } catch let error as QueryProblem {
            return APIError.validation(error.description).response()
        } catch let error as HTTPError {
            return Self.envelope(for: error.status, message: error.body).response()
        } catch let error as any HTTPResponseError {
            return Self.envelope(for: error.status, message: nil).response()
        } catch {
            if Self.isDatabaseUnavailable(error) {
                context.logger.warning("database unavailable", metadata: ["push.error": "\(DatabaseErrorText.describe(error))"])
                return APIError.databaseUnavailable.response()
            }
            if DatabaseErrorText.isServerError(error) {
                context.logger.error("database error", metadata: ["push.error": "\(DatabaseErrorText.describe(error))"])
                return APIError.internal.response()
            }
            context.logger.error("unhandled error", metadata: ["push.error": "\(error)"])
            return APIError.internal.response()
        }
    }

    /// No answer within the deadline, or an outage as ``DatabaseErrorText/isOutage(_:)`` tells
    /// one: no connection, a lost one (``DatabaseStatement/ConnectionLost`` among them), or the
    /// server ending the session or out of resources (a session ended by the server is an error
    /// from the server, 57P01, yet nothing a retry would not cure).
    static func isDatabaseUnavailable(_ error: any Error) -> Bool {
        error is DatabaseUnavailable || DatabaseErrorText.isOutage(error)
    }

    static func envelope(for status: HTTPResponse.Status, message: String?) -> APIError {
        switch status {
        case .notFound: .notFound(message ?? "no such resource")
        case .methodNotAllowed: APIError(status, code: "METHOD_NOT_ALLOWED", message ?? "method not allowed")
        case .contentTooLarge: APIError(status, code: "PAYLOAD_TOO_LARGE", message ?? "the body is too large")
        case .unauthorized: .unauthenticated(message ?? "authentication required")
        case .badRequest: .validation(message ?? "bad request")
        default: APIError(status, code: status.code >= 500 ? "INTERNAL" : "REQUEST_FAILED", message ?? status.reasonPhrase)
        }
    }
}
