import Foundation
import _CryptoExtras

/// A Google-style service-account JSON key file with a fresh RSA key, as the Firebase console
/// hands it out (PKCS#8 PEM, `\n` escaped in JSON).
public struct ServiceAccountFile: Sendable {
    public let projectID: String
    public let clientEmail: String
    public let privateKeyID: String
    public let privateKeyPEM: String
    public let path: String

    public static func make(projectID: String = "demo-project", clientEmail: String? = nil) throws -> ServiceAccountFile {
        let key = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let email = clientEmail ?? "firebase-adminsdk@\(projectID).iam.gserviceaccount.com"
        let keyID = UUID().uuidString.lowercased().replacingOccurrences(of: "-", with: "")
        let json: [String: String] = [
            "type": "service_account",
            "project_id": projectID,
            "private_key_id": keyID,
            "private_key": key.pkcs8PEMRepresentation,
            "client_email": email,
            "client_id": "1234567890",
            "token_uri": "https://oauth2.googleapis.com/token",
        ]
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("sa-\(UUID().uuidString).json").path
        try JSONSerialization.data(withJSONObject: json, options: [.sortedKeys]).write(to: URL(fileURLWithPath: path))
        return ServiceAccountFile(
            projectID: projectID, clientEmail: email, privateKeyID: keyID,
            privateKeyPEM: key.pkcs8PEMRepresentation, path: path)
    }
}
