import Foundation
import Hummingbird
import Synchronization

/// `POST /token`: Google's OAuth 2 token endpoint for the JWT-bearer grant (fcm-protocol.md §1).
struct TokenEndpoint: Sendable {
    static let jwtBearerGrantType = "urn:ietf:params:oauth:grant-type:jwt-bearer"
    static let path = "/token"

    let registry: AccountRegistry
    let ledger: DeliveryLedger
    let faults: TokenEndpointFaults
    /// `https` or `http`; with the request's authority it makes this endpoint's own URL, one of the
    /// audiences an assertion may name.
    let scheme: String

    private struct Grant: Encodable {
        var access_token: String
        var expires_in: Int
        var token_type = "Bearer"
    }

    func respond(to request: Request) async -> Response {
        let answer = await answer(request)
        ledger.recordTokenExchange(succeeded: answer.status == .ok)
        return answer.response
    }

    private func answer(_ request: Request) async -> GoogleResponse {
        if let failure = faults.takeFailure() {
            return GoogleResponses.oauthError(failure, error: "internal_failure", description: "Scripted token endpoint failure.")
        }
        guard request.headers[.contentType]?.lowercased().hasPrefix("application/x-www-form-urlencoded") == true else {
            return GoogleResponses.oauthError(
                error: "invalid_request", description: "Content-Type must be application/x-www-form-urlencoded.")
        }
        guard let body = try? await request.body.collect(upTo: 64 * 1024) else {
            return GoogleResponses.oauthError(error: "invalid_request", description: "Request body too large.")
        }
        let form = FormURLEncoded.decode(String(buffer: body))
        let grantType = form["grant_type"] ?? ""
        guard grantType == Self.jwtBearerGrantType else {
            return GoogleResponses.oauthError(error: "unsupported_grant_type", description: "Invalid grant_type: \(grantType)")
        }
        guard let assertion = form["assertion"], !assertion.isEmpty else {
            return GoogleResponses.oauthError(error: "invalid_request", description: "Missing required parameter: assertion")
        }
        let verifier = AssertionVerifier(
            ownAudience: "\(scheme)://\(request.head.authority ?? "")\(Self.path)",
            now: Date(),
            lookUpAccount: registry.account(clientEmail:)
        )
        do throws(AssertionRejection) {
            let verified = try verifier.verify(assertion)
            let grant = Grant(
                access_token: registry.issueAccessToken(for: verified.clientEmail, scopes: verified.scopes),
                expires_in: Int(registry.tokenLifetime.components.seconds)
            )
            return GoogleResponses.json(.ok, encoding: grant)
        } catch {
            return GoogleResponses.oauthError(error: error.oauthError, description: error.oauthErrorDescription)
        }
    }
}

/// Scripted transient failures of the token endpoint, to exercise a sender's retry of token refreshes.
final class TokenEndpointFaults: Sendable {
    private struct Pending {
        var remaining = 0
        var status = HTTPResponse.Status.serviceUnavailable
    }

    private let pending = Mutex(Pending())

    func failNext(count: Int, status: HTTPResponse.Status) {
        pending.withLock { $0 = Pending(remaining: count, status: status) }
    }

    func takeFailure() -> HTTPResponse.Status? {
        pending.withLock { pending in
            guard pending.remaining > 0 else { return nil }
            pending.remaining -= 1
            return pending.status
        }
    }
}
