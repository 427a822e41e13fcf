import Crypto
import Hummingbird

/// Guards the service/admin endpoints with the `PUSH_ADMIN_TOKEN` bearer token. Without a
/// configured token the endpoints do not exist: they answer 404 exactly like an unknown path.
struct AdminAuthenticator: RouterMiddleware {
    typealias Context = APIRequestContext
    /// SHA-256 of the configured token: comparing two digests of fixed length in constant time
    /// tells an attacker nothing about the token's length or how much of a guess matched.
    private let expectedDigest: SHA256.Digest?

    init(token: String?) {
        expectedDigest = token.map { SHA256.hash(data: Array($0.utf8)) }
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let expectedDigest else { throw APIError.notFound("no such resource") }
        guard let presented = request.bearerToken else {
            throw APIError.unauthenticated("the admin token is required (Authorization: Bearer $PUSH_ADMIN_TOKEN)")
        }
        guard Self.constantTimeEqual(SHA256.hash(data: Array(presented.utf8)), expectedDigest) else {
            context.logger.notice("admin token refused")
            throw APIError.unauthenticated("the admin token is not valid")
        }
        return try await next(request, context)
    }

    static func constantTimeEqual(_ left: SHA256.Digest, _ right: SHA256.Digest) -> Bool {
        var difference: UInt8 = 0
        for (a, b) in zip(left, right) { difference |= a ^ b }
        return difference == 0
    }
}
