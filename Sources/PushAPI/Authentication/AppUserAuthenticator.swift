import Hummingbird
import Logging

/// Accepts the access token from `Authorization: Bearer …` or the `accessToken` cookie (the
/// auth server sets it as an HttpOnly cookie), verifies it, and requires its app to exist. A
/// logout (DELETE) is taken with a token expired up to the verifier's `logoutGrace` ago: an app
/// keeps a logout made offline with the token it had then, and has no fresh one once signed out.
struct AppUserAuthenticator: RouterMiddleware {
    typealias Context = APIRequestContext
    let verifier: UserTokenVerifier
    let knownApps: KnownApps

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let token = Self.accessToken(in: request) else {
            throw APIError.unauthenticated("an access token is required (Authorization: Bearer, or the accessToken cookie)")
        }
        let user: AppUser
        do {
            user = try verifier.verify(token, expiredWithin: request.method == .delete ? verifier.logoutGrace : .zero)
        } catch {
            context.logger.info("access token refused", metadata: ["push.reason": "\(error)"])
            throw APIError.unauthenticated(error.description)
        }
        guard try await knownApps.contains(user.appID) else {
            throw APIError.forbidden("app \(user.appID) is not registered with this service")
        }
        var context = context
        context.appUser = user
        context.logger[metadataKey: "push.user_id"] = "\(user.userID)"
        context.logger[metadataKey: "push.app_id"] = "\(user.appID)"
        return try await next(request, context)
    }

    static func accessToken(in request: Request) -> String? {
        if request.headers[.authorization] != nil {
            return request.bearerToken
        }
        if let cookie = request.cookies["accessToken"], !cookie.value.isEmpty {
            return cookie.value
        }
        return nil
    }
}
