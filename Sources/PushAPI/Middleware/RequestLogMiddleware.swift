import HTTPTypes
import Hummingbird
import Logging

/// One structured line per request: request id, method, path (without the query string, which
/// could carry secrets), status and duration. The id is echoed as `X-Request-Id`.
struct RequestLogMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let start = ContinuousClock.now
        var response = try await next(request, context)
        response.headers[.requestID] = context.id
        let elapsed = ContinuousClock.now - start
        let milliseconds = Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15
        let level: Logger.Level = response.status.code >= 500 ? .error : .info
        context.logger.log(level: level, "request", metadata: [
            "http.method": "\(request.method)",
            "http.path": "\(request.uri.path)",
            "http.status": "\(response.status.code)",
            "http.duration_ms": "\((milliseconds * 1000).rounded() / 1000)",
        ])
        return response
    }
}

extension HTTPField.Name {
    static let requestID = Self("X-Request-Id")!
}
