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

/// Verifies the app users' access tokens (issued by the auth server) with jwt-kit.
///
/// The algorithm is chosen by the configured key, never by the token: each algorithm has its
/// own key collection, and a token whose `alg` has no configured key is refused before any
/// cryptography runs (no `none`, no HS256-with-the-RSA-public-key confusion). jwt-kit's parser
/// decodes the token and its claims into their types, the key's algorithm checks the signature,
/// and the verifier checks the claims' values.
public struct UserTokenVerifier: Sendable {
    public struct Configuration: Sendable {
        public var hmacSecret: String?
        public var publicKeyPEM: String?
        public var publicKeyPath: String
        public var issuer: String?
        public var audience: String?
        /// How long after its `exp` an access token still signs a logout (`LOGOUT_TOKEN_GRACE_SECONDS`).
        public var logoutGrace: Duration

        /// A week: a logout made offline, kept by the app with the access token it had then,
        /// still arrives when the phone is back days later, after that token expired.
        public static let defaultLogoutGrace = Duration.seconds(7 * 86_400)

        public init(
            hmacSecret: String? = nil, publicKeyPEM: String? = nil, publicKeyPath: String = "<inline>",
            issuer: String? = nil, audience: String? = nil, logoutGrace: Duration = defaultLogoutGrace
        ) {
            self.hmacSecret = hmacSecret
            self.publicKeyPEM = publicKeyPEM
            self.publicKeyPath = publicKeyPath
            self.issuer = issuer
            self.audience = audience
            self.logoutGrace = logoutGrace
        }
    }

    /// Per accepted `alg`, the algorithm of its key collection's one key.
    private let algorithms: [String: any JWTAlgorithm]
    private let issuer: String?
    private let audience: String?
    let logoutGrace: Duration

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
        var algorithms: [String: any JWTAlgorithm] = [:]
        for (alg, collection) in keys {
            // The collection's one key is its default.
            algorithms[alg] = try! await collection.getKey()
        }
        self.algorithms = algorithms
        self.issuer = configuration.issuer
        self.audience = configuration.audience
        self.logoutGrace = configuration.logoutGrace
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
            case .missingUser: "the access token has no positive integer userId (or decimal sub) claim"
            case .missingApp: "the access token has no integer appId claim"
            }
        }
    }

    /// Synchronous, without the key collection: its `verify` is an actor method that hops between
    /// executors four times per token, which cost push-api a third of its registrations per second
    /// (bench/registration/README.md, "jwt-kit").
    /// `expiredWithin`: how long after its `exp` the token is still taken (a logout's
    /// `logoutGrace`; nothing else's). Signature, algorithm, issuer and audience are checked alike.
    public func verify(_ token: String, now: Date = Date(), expiredWithin grace: Duration = .zero) throws(Failure) -> AppUser {
        let bytes = Array(token.utf8)
        guard let segments = try? Self.parser.getTokenParts(bytes), Self.isCanonical(segments.header),
            let alg = Self.algorithm(in: segments.header)
        else { throw .malformed }
        guard let algorithm = algorithms[alg] else { throw .algorithmNotAccepted(alg) }
        guard Self.isCanonical(segments.signature),
            let (_, claims, signature) = try? Self.parser.parse(bytes, as: AccessTokenClaims.self)
        else { throw .malformed }
        let signed: Bool
        do {
            signed = try algorithm.verify(signature, signs: bytes[..<segments.payload.endIndex])
        } catch {
            throw .malformed
        }
        guard signed else { throw .badSignature }
        // After the signature: a signed payload spelt otherwise is malformed, an unsigned one a bad signature.
        guard Self.isCanonical(segments.payload) else { throw .malformed }

        guard let exp = claims.exp else { throw .missingExpiry }
        do { try exp.verifyNotExpired(currentDate: now.addingTimeInterval(-Double(grace.components.seconds))) } catch { throw .expired }
        // Not jwt-kit's verifyNotBefore, which refuses nbf == now: RFC 7519 §4.1.5 accepts it.
        if let nbf = claims.nbf, nbf.value > now { throw .notYetValid }
        if let issuer, claims.iss?.value != issuer { throw .wrongIssuer }
        if let audience {
            guard let aud = claims.aud else { throw .wrongAudience }
            do { try aud.verifyIntendedAudience(includes: audience) } catch { throw .wrongAudience }
        }
        // Positive, as push_enqueue's user ids are: a device registered for user 0 or -1 could
        // never be sent to.
        guard let userID = claims.userId ?? claims.sub.flatMap({ Int64(plainDecimal: $0.value) }), userID > 0 else { throw .missingUser }
        guard let appID = claims.appId else { throw .missingApp }
        return AppUser(userID: userID, appID: appID)
    }

    // Made once: a parser's default JSONDecoder is set up when the parser is.
    private static let parser = DefaultJWTParser()

    /// The header's `alg`, read to choose the key collection before jwt-kit reads the header
    /// again. `segment` is canonical: spelt in Foundation's alphabet and padded, it decodes.
    /// Read by JSONParser, like request bodies: 1.8 µs for this step against 3.0 with JSONDecoder.
    private static func algorithm(in segment: ArraySlice<UInt8>) -> String? {
        var base64 = Data(
            segment.map { byte in
                switch byte {
                case UInt8(ascii: "-"): UInt8(ascii: "+")
                case UInt8(ascii: "_"): UInt8(ascii: "/")
                default: byte
                }
            })
        base64.append(contentsOf: repeatElement(UInt8(ascii: "="), count: (4 - segment.count % 4) % 4))
        guard let json = Data(base64Encoded: base64) else { return nil }
        return (try? JSONParser.parse(json))?["alg"]?.string
    }

    /// Whether a segment is unpadded base64url (RFC 4648 §5) whose last character has no stray
    /// bits. jwt-kit's decoder also takes trailing `=` and ignores those bits, which would give
    /// one token several spellings that all verify; only the canonical one is accepted.
    private static func isCanonical(_ segment: ArraySlice<UInt8>) -> Bool {
        guard
            segment.allSatisfy({ byte in
                switch byte {
                case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                    UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"):
                    true
                default: false
                }
            })
        else { return false }
        guard let last = segment.last else { return true }
        switch segment.count % 4 {
        case 2: return "AQgw".utf8.contains(last)  // 2 bits of data, 4 unused
        case 3: return "AEIMQUYcgkosw048".utf8.contains(last)  // 4 bits of data, 2 unused
        case 1: return false
        default: return true
        }
    }
}

/// The claims as jwt-kit decodes them: a claim of the wrong JSON type fails the decoding (a
/// malformed token); an absent or null one is nil.
struct AccessTokenClaims: JWTPayload {
    var exp: ExpirationClaim?
    var nbf: NotBeforeClaim?
    var iss: IssuerClaim?
    var aud: AudienceClaim?
    var sub: SubjectClaim?
    var userId: Int64?
    var appId: Int64?

    /// Not called: `UserTokenVerifier.verify` checks the claims against its clock, issuer and
    /// audience, and answers each missing claim with its own failure.
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}
