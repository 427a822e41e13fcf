import Crypto
import Foundation
import JWTKit

/// The caller of the device endpoints, from a verified access token.
public struct AppUser: Sendable, Equatable {
    public let userID: Int64
    public let appID: Int64
}

/// Why a configured JWT key cannot be used; raised at startup.
public enum JWTConfigurationError: Error, CustomStringConvertible, Equatable {
    case noKey
    case secretTooShort(bytes: Int)
    case unreadablePublicKey(path: String)
    case unsupportedPublicKey(path: String)

    public var description: String {
        switch self {
        case .noKey:
            "no JWT key configured: set JWT_SECRET (HS256, at least 32 bytes) or JWT_PUBLIC_KEY_FILE (RSA or EC P-256 PEM)"
        case .secretTooShort(let bytes):
            "JWT_SECRET is \(bytes) bytes; HS256 needs at least 32"
        case .unreadablePublicKey(let path):
            "JWT_PUBLIC_KEY_FILE \(path) cannot be read"
        case .unsupportedPublicKey(let path):
            "JWT_PUBLIC_KEY_FILE \(path) is not an RSA or EC P-256 public key in PEM form"
        }
    }
}

/// Verifies the app users' access tokens (issued by the auth server).
///
/// The algorithm is chosen by the configured key, never by the token: each algorithm has its
/// own key collection, and a token whose `alg` has no configured key is refused before any
/// cryptography runs (no `none`, no HS256-with-the-RSA-public-key confusion).
public struct UserTokenVerifier: Sendable {
    public struct Configuration: Sendable {
        public var hmacSecret: String?
        public var publicKeyPEM: String?
        public var publicKeyPath: String
        public var issuer: String?
        public var audience: String?

        public init(hmacSecret: String? = nil, publicKeyPEM: String? = nil, publicKeyPath: String = "<inline>",
                    issuer: String? = nil, audience: String? = nil) {
            self.hmacSecret = hmacSecret
            self.publicKeyPEM = publicKeyPEM
            self.publicKeyPath = publicKeyPath
            self.issuer = issuer
            self.audience = audience
        }
    }

    private let keysByAlgorithm: [String: JWTKeyCollection]
    private let issuer: String?
    private let audience: String?

    public init(_ configuration: Configuration) async throws(JWTConfigurationError) {
        var keys: [String: JWTKeyCollection] = [:]
        if let secret = configuration.hmacSecret {
            // jwt-kit traps on short HMAC keys in debug builds; refuse them with a message instead.
            guard secret.utf8.count >= 32 else { throw .secretTooShort(bytes: secret.utf8.count) }
            keys["HS256"] = await JWTKeyCollection().add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256)
        }
        if let pem = configuration.publicKeyPEM {
            if let rsa = try? Insecure.RSA.PublicKey(pem: pem) {
                keys["RS256"] = await JWTKeyCollection().add(rsa: rsa, digestAlgorithm: .sha256)
            } else if let ec = try? ES256PublicKey(pem: pem) {
                keys["ES256"] = await JWTKeyCollection().add(ecdsa: ec)
            } else {
                throw .unsupportedPublicKey(path: configuration.publicKeyPath)
            }
        }
        guard !keys.isEmpty else { throw .noKey }
        self.keysByAlgorithm = keys
        self.issuer = configuration.issuer
        self.audience = configuration.audience
    }

    public enum Failure: Error, Equatable, CustomStringConvertible {
        case malformed
        case algorithmNotAccepted(String)
        case badSignature
        case expired
        case missingExpiry
        case notYetValid
        case wrongIssuer
        case wrongAudience
        case missingUser
        case missingApp

        public var description: String {
            switch self {
            case .malformed: "the access token is not a well-formed JWT"
            case .algorithmNotAccepted(let alg): "the access token's algorithm \(alg) is not accepted"
            case .badSignature: "the access token's signature is invalid"
            case .expired: "the access token has expired"
            case .missingExpiry: "the access token has no exp claim"
            case .notYetValid: "the access token is not valid yet (nbf)"
            case .wrongIssuer: "the access token's issuer is not accepted"
            case .wrongAudience: "the access token's audience is not accepted"
            case .missingUser: "the access token has no integer userId (or decimal sub) claim"
            case .missingApp: "the access token has no integer appId claim"
            }
        }
    }

    public func verify(_ token: String, now: Date = Date()) async throws(Failure) -> AppUser {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let headerData = Self.base64URLDecode(parts[0]),
              let header = try? JSONDecoder().decode(Header.self, from: headerData)
        else { throw .malformed }
        guard let keys = keysByAlgorithm[header.alg] else { throw .algorithmNotAccepted(header.alg) }

        let claims: Claims
        do {
            claims = try await keys.verify(token, as: Claims.self)
        } catch let error as JWTError where error.errorType == .signatureVerificationFailed {
            throw .badSignature
        } catch {
            throw .malformed
        }
        guard let exp = claims.exp else { throw .missingExpiry }
        guard exp.value > now else { throw .expired }
        if let nbf = claims.nbf, nbf.value > now { throw .notYetValid }
        if let issuer, claims.iss?.value != issuer { throw .wrongIssuer }
        if let audience, !(claims.aud?.value.contains(audience) ?? false) { throw .wrongAudience }
        guard let userID = claims.userId ?? claims.sub.flatMap({ Int64($0.value) }) else { throw .missingUser }
        guard let appID = claims.appId else { throw .missingApp }
        return AppUser(userID: userID, appID: appID)
    }

    private struct Header: Decodable {
        let alg: String
    }

    /// Date checks happen in `verify(_:now:)`, after the signature, with precise messages.
    private struct Claims: JWTPayload {
        let exp: ExpirationClaim?
        let nbf: NotBeforeClaim?
        let iss: IssuerClaim?
        let aud: AudienceClaim?
        let sub: SubjectClaim?
        let userId: Int64?
        let appId: Int64?

        func verify(using algorithm: some JWTAlgorithm) async throws {}
    }

    static func base64URLDecode(_ text: Substring) -> Data? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        return Data(base64Encoded: base64)
    }
}
