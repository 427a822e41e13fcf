import Synchronization
import _CryptoExtras

/// Registered service accounts and the access tokens minted for them.
final class AccountRegistry: Sendable {
    struct Account: Sendable {
        var publicKey: _RSA.Signing.PublicKey
        var keyID: String?
        var projectIDs: Set<String>
    }

    enum Authorization: Sendable, Equatable {
        case allowed
        /// Missing, unknown, expired or revoked bearer token: 401 UNAUTHENTICATED.
        case unauthenticated
        /// A valid token whose account has no access to the project: 403 PERMISSION_DENIED.
        case forbidden
        /// A valid token whose scopes do not cover FCM: 403 PERMISSION_DENIED, insufficient scopes.
        case insufficientScopes
    }

    /// The OAuth scopes that authorize `messages:send`, as the FCM API's discovery document lists them.
    static let sendScopes: Set<String> = [
        "https://www.googleapis.com/auth/firebase.messaging",
        "https://www.googleapis.com/auth/cloud-platform",
    ]

    private struct IssuedAccessToken {
        var clientEmail: String
        var expiresAt: ContinuousClock.Instant
        var maySend: Bool
    }

    private struct State {
        var accounts: [String: Account] = [:]
        var accessTokens: [String: IssuedAccessToken] = [:]
    }

    private let state = Mutex(State())
    let tokenLifetime: Duration

    init(tokenLifetime: Duration) {
        self.tokenLifetime = tokenLifetime
    }

    /// Registering an email again replaces its key (a rotation) and adds the project to the ones it may use.
    func register(_ serviceAccount: RegisteredAccount) {
        state.withLock { state in
            var projects = state.accounts[serviceAccount.clientEmail]?.projectIDs ?? []
            projects.insert(serviceAccount.projectID)
            state.accounts[serviceAccount.clientEmail] = Account(
                publicKey: serviceAccount.publicKey,
                keyID: serviceAccount.keyID,
                projectIDs: projects
            )
        }
    }

    func account(clientEmail: String) -> Account? {
        state.withLock { $0.accounts[clientEmail] }
    }

    func issueAccessToken(for clientEmail: String, scopes: [String]) -> String {
        var random = SystemRandomNumberGenerator()
        let token = "ya29." + Base64URL.encode((0..<48).map { _ in UInt8.random(in: .min ... .max, using: &random) })
        let now = ContinuousClock.now
        state.withLock { state in
            // Drop expired tokens here, on the rare mint path, so the send path never has to.
            state.accessTokens = state.accessTokens.filter { $0.value.expiresAt > now }
            state.accessTokens[token] = IssuedAccessToken(
                clientEmail: clientEmail, expiresAt: now + tokenLifetime,
                maySend: scopes.contains(where: Self.sendScopes.contains))
        }
        return token
    }

    func revokeAccessTokens() {
        state.withLock { $0.accessTokens.removeAll() }
    }

    /// `authorizationHeader` is the raw `Authorization` value, `Bearer <token>`.
    func authorize(authorizationHeader: String?, projectID: String) -> Authorization {
        guard let authorizationHeader, let token = Self.bearerToken(authorizationHeader) else { return .unauthenticated }
        let now = ContinuousClock.now
        return state.withLock { state in
            guard let issued = state.accessTokens[token], issued.expiresAt > now else { return .unauthenticated }
            guard issued.maySend else { return .insufficientScopes }
            guard state.accounts[issued.clientEmail]?.projectIDs.contains(projectID) == true else { return .forbidden }
            return .allowed
        }
    }

    private static func bearerToken(_ header: String) -> String? {
        let scheme = "bearer "
        guard header.utf8.count > scheme.utf8.count, header.prefix(scheme.count).lowercased() == scheme else { return nil }
        let token = header.dropFirst(scheme.count).drop(while: { $0 == " " })
        return token.isEmpty ? nil : String(token)
    }
}
