import Foundation
import WireFormats
import _CryptoExtras

/// A freshly generated service account (RSA-2048) for tests and benchmarks: the private half to configure a
/// sender with, the public half to register with the emulator.
public struct ServiceAccountFixture: Sendable {
    public let projectID: String
    public let clientEmail: String
    public let privateKeyID: String
    public let privateKey: _RSA.Signing.PrivateKey

    /// PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`), as in a Google service-account file.
    public var privateKeyPEM: String { privateKey.pkcs8PEMRepresentation }

    /// What to register with the emulator.
    public var serviceAccount: RegisteredAccount {
        RegisteredAccount(clientEmail: clientEmail, projectID: projectID, publicKey: privateKey.publicKey, keyID: privateKeyID)
    }

    /// `clientEmail` defaults to `fcm-sender@<projectID>.iam.gserviceaccount.com`.
    public static func generate(projectID: String = "emulated-project", clientEmail: String? = nil) throws -> ServiceAccountFixture {
        var random = SystemRandomNumberGenerator()
        let keyID = (0..<20).map { _ in String(format: "%02x", UInt8.random(in: .min ... .max, using: &random)) }.joined()
        return ServiceAccountFixture(
            projectID: projectID,
            clientEmail: clientEmail ?? "fcm-sender@\(projectID).iam.gserviceaccount.com",
            privateKeyID: keyID,
            privateKey: try _RSA.Signing.PrivateKey(keySize: .bits2048)
        )
    }

    /// A Google-style service-account JSON file. Point `tokenURI` at the emulator's `tokenURL` when the
    /// consumer reads `token_uri`.
    public func json(tokenURI: String = "https://oauth2.googleapis.com/token") -> String {
        let file = ServiceAccountFile(
            type: "service_account",
            project_id: projectID,
            private_key_id: privateKeyID,
            private_key: privateKeyPEM,
            client_email: clientEmail,
            client_id: "",
            auth_uri: "https://accounts.google.com/o/oauth2/auth",
            token_uri: tokenURI
        )
        return String(decoding: WireJSON.encoded(file), as: UTF8.self)
    }

    private struct ServiceAccountFile: Encodable {
        var type: String
        var project_id: String
        var private_key_id: String
        var private_key: String
        var client_email: String
        var client_id: String
        var auth_uri: String
        var token_uri: String
    }
}
