import Crypto
import Foundation
import _CryptoExtras

/// Signs access tokens the way an auth server would, and forges the ones an attacker would: for
/// push-api's own tests and for the clients tested against it.
public struct TokenMint {
    public static let secret = "test-secret-that-is-at-least-32-bytes-long"

    public enum Key {
        case hmac(String)
        case rsa(_RSA.Signing.PrivateKey)
        case ec(P256.Signing.PrivateKey)
        case none
    }

    public static func claims(userID: Int64? = 42, appID: Int64?, expiresIn: TimeInterval? = 600, extra: [String: Any] = [:]) -> [String:
        Any]
    {
        var claims: [String: Any] = extra
        if let userID { claims["userId"] = userID }
        if let appID { claims["appId"] = appID }
        if let expiresIn { claims["exp"] = Int(Date().timeIntervalSince1970 + expiresIn) }
        return claims
    }

    public static func sign(_ claims: [String: Any], with key: Key = .hmac(secret), alg: String? = nil) -> String {
        let algorithm: String
        switch key {
        case .hmac: algorithm = alg ?? "HS256"
        case .rsa: algorithm = alg ?? "RS256"
        case .ec: algorithm = alg ?? "ES256"
        case .none: algorithm = alg ?? "none"
        }
        let header = base64URL(try! JSONSerialization.data(withJSONObject: ["alg": algorithm, "typ": "JWT"], options: .sortedKeys))
        let payload = base64URL(try! JSONSerialization.data(withJSONObject: claims, options: .sortedKeys))
        let input = Data("\(header).\(payload)".utf8)
        let signature: Data
        switch key {
        case .hmac(let secret):
            signature = hmac(input, secret: secret)
        case .rsa(let rsa):
            signature = try! rsa.signature(for: input, padding: .insecurePKCS1v1_5).rawRepresentation
        case .ec(let ec):
            signature = try! ec.signature(for: input).rawRepresentation
        case .none:
            signature = Data()
        }
        return "\(header).\(payload).\(base64URL(signature))"
    }

    /// HS256 over any signing input, also one no well-formed token has.
    public static func hmac(_ input: Data, secret: String = secret) -> Data {
        Data(HMAC<SHA256>.authenticationCode(for: input, using: SymmetricKey(data: Data(secret.utf8))))
    }

    public static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
