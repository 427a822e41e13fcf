import HTTPTypes
import Hummingbird

/// What every answer carries, errors included: `Cache-Control: no-store`, since answers hold
/// device tokens, job details and delivery logs that no browser or shared cache may keep, and
/// none is worth caching; and `X-Content-Type-Options: nosniff`, so that a browser never reads
/// a JSON answer as anything else.
struct ResponseHeadersMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var response = try await next(request, context)
        response.headers[.cacheControl] = "no-store"
        response.headers[.xContentTypeOptions] = "nosniff"
        return response
    }
}

extension HTTPField.Name {
    static let xContentTypeOptions = Self("X-Content-Type-Options")!
}
