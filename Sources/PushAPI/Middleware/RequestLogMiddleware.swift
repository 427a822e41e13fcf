import DeviceRegistry
import HTTPTypes
import Hummingbird
import Logging

/// One structured line per request: request id, method, path (without the query string, which
/// could carry secrets; long segments cut like tokens, since a client may put a device token
/// where an id belongs), status and duration. The id is echoed as `X-Request-Id`.
struct RequestLogMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let start = ContinuousClock.now
        var response = try await next(request, context)
        response.headers[.requestID] = context.id
        let elapsed = ContinuousClock.now - start
        let milliseconds = Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15
        let level: Logger.Level = response.status.code >= 500 ? .error : .info
        context.logger.log(
            level: level, "request",
            metadata: [
                "http.method": "\(request.method)",
                "http.path": "\(Self.loggable(request.uri.path))",
                "http.status": "\(response.status.code)",
                "http.duration_ms": "\((milliseconds * 1000).rounded() / 1000)",
            ])
        return response
    }

    static func loggable(_ path: String) -> String {
        guard path.utf8.count > 20 else { return path }
        return path.split(separator: "/", omittingEmptySubsequences: false)
            .map { $0.count > 20 ? maskedToken(String($0)) : String($0) }
            .joined(separator: "/")
    }
}

extension HTTPField.Name {
    static let requestID = Self("X-Request-Id")!
}
