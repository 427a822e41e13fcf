import DeviceRegistry
import Foundation
import JWTKit

/// The RS256 JWT a service account presents to Google's token endpoint (the JWT bearer grant):
/// `{"iss": client_email, "scope": firebase.messaging, "aud": token URL, "iat", "exp"}`, its
/// `private_key_id` as `kid`, whole seconds, `iat` backdated a little against clock skew, at most
/// an hour long. jwt-kit signs it.
struct ServiceAccountAssertion {
    static let scope = "https://www.googleapis.com/auth/firebase.messaging"
    static let backdate: TimeInterval = 10
    static let lifetime: TimeInterval = 3600

    struct Claims: JWTPayload {
        let iss: IssuerClaim
        let scope: String
        let aud: AudienceClaim
        let iat: IssuedAtClaim
        let exp: ExpirationClaim

        /// Signed here and verified by Google, never read back.
        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    let key: Insecure.RSA.PrivateKey
    let clientEmail: String
    let keyID: JWKIdentifier?

    init(_ account: ServiceAccount) throws(AccessTokenError) {
        do {
            key = try Insecure.RSA.PrivateKey(pem: account.privateKeyPEM)
        } catch {
            throw .unreadablePrivateKey
        }
        clientEmail = account.clientEmail
        keyID = account.privateKeyID.map { JWKIdentifier(string: $0) }
    }

    func signed(audience: String, now: Date = Date()) async throws -> String {
        // Whole seconds: the claims are written as numbers of seconds, and Google wants integers.
        let issuedAt = Date(timeIntervalSince1970: (now.timeIntervalSince1970 - Self.backdate).rounded(.down))
        let claims = Claims(
            iss: IssuerClaim(value: clientEmail), scope: Self.scope, aud: AudienceClaim(value: audience),
            iat: IssuedAtClaim(value: issuedAt), exp: ExpirationClaim(value: issuedAt + Self.lifetime))
        let keys = await JWTKeyCollection().add(rsa: key, digestAlgorithm: .sha256, kid: keyID)
        return try await keys.sign(claims, kid: keyID)
    }
}
