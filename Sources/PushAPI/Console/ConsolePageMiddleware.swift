import HTTPTypes
import Hummingbird

/// What every console answer carries, and errors as pages rather than the API's JSON envelope.
/// The policy allows no script at all (the console has none: live pages refresh themselves),
/// styles from our own stylesheet only, and no framing by any site.
struct ConsolePageMiddleware: RouterMiddleware {
    typealias Context = APIRequestContext
    let pages: ConsolePages

    static let contentSecurityPolicy =
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var response: Response
        do {
            response = try await next(request, context)
        } catch let error as ConsoleError {
            if error == .signInRequired, request.method == .get || request.method == .head {
                response = .redirect(to: "/console/sign-in", type: .normal)
            } else {
                response = pages.error(status: error.status, message: error.message)
            }
        } catch let error as QueryProblem {
            response = pages.error(status: .badRequest, message: error.description)
        } catch let error as APIError {
            response = pages.error(status: error.status, message: error.message)
        } catch {
            // The API's envelope middleware tells an unavailable database from the rest and logs
            // it: take its verdict, show it as a page.
            let verdict = try await ErrorEnvelopeMiddleware<Context>().handle(request, context: context) { _, _ in throw error }
            let message =
                switch verdict.status {
                case .serviceUnavailable: APIError.databaseUnavailable.message
                case .internalServerError: APIError.internal.message
                default: verdict.status.reasonPhrase
                }
            response = pages.error(status: verdict.status, message: message)
        }
        response.headers[.contentSecurityPolicy] = Self.contentSecurityPolicy
        response.headers[.xFrameOptions] = "DENY"
        response.headers[.referrerPolicy] = "same-origin"
        return response
    }
}

extension HTTPField.Name {
    static let contentSecurityPolicy = Self("Content-Security-Policy")!
    static let xFrameOptions = Self("X-Frame-Options")!
    static let referrerPolicy = Self("Referrer-Policy")!
}
