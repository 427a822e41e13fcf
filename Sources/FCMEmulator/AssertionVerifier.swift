import Crypto
import Foundation
import WireFormats
import _CryptoExtras

/// Why the token endpoint refuses a JWT-bearer assertion, with the OAuth error Google answers.
enum AssertionRejection: Error, Equatable {
    case malformed(String)
    case unknownAccount
    case invalidSignature
    case badTimeframe
    case wrongAudience(expected: String)
    /// No `scope` claim, or an empty one.
    case missingScope

    var oauthError: String {
        switch self {
        case .missingScope: "invalid_scope"
        default: "invalid_grant"
        }
    }

    var oauthErrorDescription: String {
        switch self {
        case .malformed(let reason): "Invalid JWT: \(reason)"
        case .unknownAccount: "Invalid grant: account not found"
        case .invalidSignature: "Invalid JWT Signature."
        case .badTimeframe:
            "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim."
        case .wrongAudience(let expected): "Invalid JWT: Failed audience check. The expected audience is \(expected)."
        case .missingScope: "Empty or missing scope not allowed."
        }
    }
}

/// Checks a service-account assertion (RFC 7523) the way Google's token endpoint does.
struct AssertionVerifier {
    /// What an assertion proves: the account, and the scopes its access token will carry.
    struct Grant: Equatable {
        var clientEmail: String
        var scopes: [String]
    }

    static let maximumLifetimeSeconds: Int64 = 3600
    /// How far in the future `iat` may be before it counts as an unreasonable timeframe.
    static let allowedClockSkewSeconds: Int64 = 300
    /// The audiences Google's token endpoint accepts whatever URL the assertion was posted to:
    /// google-auth (Python) and gtoken (Node) always sign for the first, whatever the key file's
    /// `token_uri`; older libraries signed for the others.
    static let googleTokenAudiences: Set<String> = [
        "https://oauth2.googleapis.com/token",
        "https://www.googleapis.com/oauth2/v4/token",
        "https://accounts.google.com/o/oauth2/token",
    ]

    /// This endpoint's own URL, which clients that sign for the `token_uri` they post to name
    /// (golang.org/x/oauth2, push-worker); Google's audiences are accepted besides.
    var ownAudience: String
    var now: Date
    var lookUpAccount: (String) -> AccountRegistry.Account?

    /// Returns the account the assertion proves and the scopes it asks for. The scopes are not
    /// checked against the FCM API here, as Google does not: an access token whose scopes do not
    /// cover FCM is refused when it is used to send.
    func verify(_ assertion: String) throws(AssertionRejection) -> Grant {
        let segments = assertion.split(separator: ".", omittingEmptySubsequences: false)
        guard segments.count == 3 else { throw .malformed("an assertion has 3 dot-separated segments") }
        guard
            let headerBytes = Base64URL.decode(segments[0]),
            let claimsBytes = Base64URL.decode(segments[1]),
            let signatureBytes = Base64URL.decode(segments[2])
        else { throw .malformed("segments must be unpadded base64url") }
        guard let header = JSONParser.object(headerBytes, strings: ["alg", "kid"]) else {
            throw .malformed("the header is not a JSON object")
        }
        guard header["alg"]?.string == "RS256" else { throw .invalidSignature }
        // iat and exp as numbers, not integers: a fraction is seen and refused by checkTimeframe, not rounded.
        guard let claims = JSONParser.object(claimsBytes, strings: ["iss", "scope", "aud"], numbers: ["iat", "exp"]) else {
            throw .malformed("the claim set is not a JSON object with string iss, scope, aud and numeric iat, exp")
        }
        guard let issuer = claims["iss"]?.string, let account = lookUpAccount(issuer) else { throw .unknownAccount }
        if let kid = header["kid"]?.string, let registeredKeyID = account.keyID, kid != registeredKeyID {
            throw .invalidSignature
        }
        let signingInput = Data(assertion.utf8.prefix(segments[0].utf8.count + 1 + segments[1].utf8.count))
        let signature = _RSA.Signing.RSASignature(rawRepresentation: signatureBytes)
        guard account.publicKey.isValidSignature(signature, for: SHA256.hash(data: signingInput), padding: .insecurePKCS1v1_5)
        else { throw .invalidSignature }
        guard let audience = claims["aud"]?.string, audience == ownAudience || Self.googleTokenAudiences.contains(audience) else {
            throw .wrongAudience(expected: ownAudience)
        }
        try checkTimeframe(issuedAt: claims["iat"]?.seconds, expiresAt: claims["exp"]?.seconds)
        let scopes = (claims["scope"]?.string ?? "").split(separator: " ").map(String.init)
        guard !scopes.isEmpty else { throw .missingScope }
        return Grant(clientEmail: issuer, scopes: scopes)
    }

    private func checkTimeframe(issuedAt: Double?, expiresAt: Double?) throws(AssertionRejection) {
        guard
            let issuedAt = Self.wholeSeconds(issuedAt),
            let expiresAt = Self.wholeSeconds(expiresAt)
        else { throw .badTimeframe }
        let now = Int64(now.timeIntervalSince1970)
        guard
            expiresAt > issuedAt,
            expiresAt - issuedAt <= Self.maximumLifetimeSeconds,
            expiresAt > now,
            issuedAt <= now + Self.allowedClockSkewSeconds
        else { throw .badTimeframe }
    }

    private static func wholeSeconds(_ value: Double?) -> Int64? {
        guard let value, value.rounded(.towardZero) == value, abs(value) < 1e15 else { return nil }
        return Int64(value)
    }
}
