import Crypto
import DeviceRegistry
import Foundation
import JWTKit
import WireFormats

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

    private let algorithms: [String: any JWTAlgorithm]
    private let issuer: String?
    private let audience: String?

    public init(_ configuration: Configuration) async throws(JWTConfigurationError) {
        var algorithms: [String: any JWTAlgorithm] = [:]
        if let secret = configuration.hmacSecret {
            // jwt-kit traps on short HMAC keys in debug builds; refuse them with a message instead.
            guard secret.utf8.count >= 32 else { throw .secretTooShort(bytes: secret.utf8.count) }
            algorithms["HS256"] = await Self.algorithm(of: JWTKeyCollection().add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256))
        }
        if let pem = configuration.publicKeyPEM {
            if let rsa = try? Insecure.RSA.PublicKey(pem: pem) {
                algorithms["RS256"] = await Self.algorithm(of: JWTKeyCollection().add(rsa: rsa, digestAlgorithm: .sha256))
            } else if let ec = try? ES256PublicKey(pem: pem) {
                algorithms["ES256"] = await Self.algorithm(of: JWTKeyCollection().add(ecdsa: ec))
            } else {
                throw .unsupportedPublicKey(path: configuration.publicKeyPath)
            }
        }
        guard !algorithms.isEmpty else { throw .noKey }
        self.algorithms = algorithms
        self.issuer = configuration.issuer
        self.audience = configuration.audience
    }

    /// jwt-kit builds the algorithm for a key; its key collection is an actor, and verifying
    /// through it costs every request two hops between executors. The algorithm itself is a
    /// `Sendable` value that verifies synchronously.
    private static func algorithm(of keys: JWTKeyCollection) async -> any JWTAlgorithm {
        // The collection was just given its one key, which is its default.
        try! await keys.getKey()
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

    public func verify(_ token: String, now: Date = Date()) throws(Failure) -> AppUser {
        let bytes = Array(token.utf8)
        let dot = UInt8(ascii: ".")
        guard let firstDot = bytes.firstIndex(of: dot), let secondDot = bytes[(firstDot + 1)...].firstIndex(of: dot),
              !bytes[(secondDot + 1)...].contains(dot),
              case .string(let alg)? = Self.segment(bytes[..<firstDot])?["alg"]
        else { throw .malformed }
        guard let algorithm = algorithms[alg] else { throw .algorithmNotAccepted(alg) }

        guard let signature = Base64URL.decode(bytes[(secondDot + 1)...]) else { throw .malformed }
        let signed: Bool
        do {
            signed = try algorithm.verify(signature, signs: bytes[..<secondDot])
        } catch {
            throw .malformed
        }
        guard signed else { throw .badSignature }

        guard let payload = Self.segment(bytes[(firstDot + 1)..<secondDot]), case .object(let claims) = payload else {
            throw .malformed
        }
        let exp = try Self.date(claims["exp"])
        let nbf = try Self.date(claims["nbf"])
        let iss = try Self.string(claims["iss"])
        let aud = try Self.audiences(claims["aud"])
        let sub = try Self.string(claims["sub"])
        let userId = try Self.integer(claims["userId"])
        let appId = try Self.integer(claims["appId"])

        guard let exp else { throw .missingExpiry }
        guard exp > now else { throw .expired }
        if let nbf, nbf > now { throw .notYetValid }
        if let issuer, iss != issuer { throw .wrongIssuer }
        if let audience, !(aud?.contains(audience) ?? false) { throw .wrongAudience }
        guard let userID = userId ?? sub.flatMap({ Int64($0) }) else { throw .missingUser }
        guard let appID = appId else { throw .missingApp }
        return AppUser(userID: userID, appID: appID)
    }

    /// A header or claims segment: base64url of a JSON document.
    private static func segment(_ bytes: ArraySlice<UInt8>) -> JSONValue? {
        guard let json = Base64URL.decode(bytes) else { return nil }
        return try? JSONParser.parse(json)
    }

    // A claim of the wrong JSON type makes the token malformed; an absent or null one is nil.

    private static func date(_ claim: JSONValue?) throws(Failure) -> Date? {
        guard let claim, claim != .null else { return nil }
        guard let seconds = claim.seconds else { throw .malformed }
        return Date(timeIntervalSince1970: seconds)
    }

    private static func string(_ claim: JSONValue?) throws(Failure) -> String? {
        switch claim {
        case nil, .null?: return nil
        case .string(let value)?: return value
        default: throw .malformed
        }
    }

    private static func integer(_ claim: JSONValue?) throws(Failure) -> Int64? {
        switch claim {
        case nil, .null?: return nil
        case .integer(let value)?: return value
        default: throw .malformed
        }
    }

    /// `aud` is one string or an array of them (RFC 7519 §4.1.3).
    private static func audiences(_ claim: JSONValue?) throws(Failure) -> [String]? {
        switch claim {
        case nil, .null?: return nil
        case .string(let value)?: return [value]
        case .array(let values)?:
            return try values.map { value throws(Failure) in
                guard case .string(let audience) = value else { throw .malformed }
                return audience
            }
        default: throw .malformed
        }
    }
}
