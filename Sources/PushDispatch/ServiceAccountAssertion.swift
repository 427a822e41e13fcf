import _CryptoExtras
import Crypto
import DeviceRegistry
import Foundation

/// The RS256 JWT a service account presents to Google's token endpoint (the JWT bearer grant):
/// `{"iss": client_email, "scope": firebase.messaging, "aud": token URL, "iat", "exp"}`,
/// whole seconds, `iat` backdated a little against clock skew, at most an hour long.
struct ServiceAccountAssertion {
    static let scope = "https://www.googleapis.com/auth/firebase.messaging"
    static let backdate: TimeInterval = 10
    static let lifetime: TimeInterval = 3600

    let key: _RSA.Signing.PrivateKey
    let clientEmail: String
    let keyID: String?

    init(_ account: ServiceAccount) throws(AccessTokenError) {
        do {
            key = try _RSA.Signing.PrivateKey(pemRepresentation: account.privateKeyPEM)
        } catch {
            throw .unreadablePrivateKey
        }
        clientEmail = account.clientEmail
        keyID = account.privateKeyID
    }

    func signed(audience: String, now: Date = Date()) throws -> String {
        let issuedAt = Int(now.timeIntervalSince1970 - Self.backdate)
        var header = #"{"alg":"RS256","typ":"JWT""#
        if let keyID { header += #","kid":"# + Self.jsonString(keyID) }
        header += "}"
        let claims = #"{"iss":"# + Self.jsonString(clientEmail) + #","scope":"# + Self.jsonString(Self.scope)
            + #","aud":"# + Self.jsonString(audience) + #","iat":\#(issuedAt),"exp":\#(issuedAt + Int(Self.lifetime))}"#
        let input = Self.base64URL(Data(header.utf8)) + "." + Self.base64URL(Data(claims.utf8))
        let signature = try key.signature(for: Data(input.utf8), padding: .insecurePKCS1v1_5)
        return input + "." + Self.base64URL(signature.rawRepresentation)
    }

    static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    static func jsonString(_ value: String) -> String {
        // JSONEncoder on a single string is valid JSON and escapes what must be escaped.
        String(decoding: try! JSONEncoder().encode(value), as: UTF8.self)
    }
}
