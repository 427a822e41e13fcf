import _CryptoExtras
import Foundation

/// The fields of a Google service-account JSON key file that FCM sending needs.
/// `description` never includes the private key.
public struct ServiceAccount: Sendable, Equatable, CustomStringConvertible {
    public let projectID: String
    public let clientEmail: String
    public let privateKeyPEM: String
    public let privateKeyID: String?

    public var description: String { "service account \(clientEmail) (project \(projectID))" }

    public init(projectID: String, clientEmail: String, privateKeyPEM: String, privateKeyID: String?) {
        self.projectID = projectID
        self.clientEmail = clientEmail
        self.privateKeyPEM = privateKeyPEM
        self.privateKeyID = privateKeyID
    }

    /// Reads a service-account JSON as downloaded from the Firebase console and checks that the
    /// key is a usable RSA private key, so a broken file is refused now rather than at send time.
    public init(json data: Data) throws(ServiceAccountError) {
        struct File: Decodable {
            let type: String?
            let project_id: String?
            let private_key_id: String?
            let private_key: String?
            let client_email: String?
        }
        let file: File
        do {
            file = try JSONDecoder().decode(File.self, from: data)
        } catch {
            throw .notJSON
        }
        if let type = file.type, type != "service_account" { throw .wrongType(type) }
        guard let projectID = file.project_id, !projectID.isEmpty else { throw .missingField("project_id") }
        guard let clientEmail = file.client_email, clientEmail.contains("@") else { throw .missingField("client_email") }
        guard let key = file.private_key, !key.isEmpty else { throw .missingField("private_key") }
        do {
            _ = try _RSA.Signing.PrivateKey(pemRepresentation: key)
        } catch {
            throw .unreadablePrivateKey
        }
        self.init(projectID: projectID, clientEmail: clientEmail, privateKeyPEM: key,
                  privateKeyID: file.private_key_id.flatMap { $0.isEmpty ? nil : $0 })
    }
}

public enum ServiceAccountError: Error, CustomStringConvertible, Equatable {
    case notJSON
    case wrongType(String)
    case missingField(String)
    case unreadablePrivateKey

    public var description: String {
        switch self {
        case .notJSON: "service account file is not JSON"
        case .wrongType(let type): "service account file has type '\(type)', expected 'service_account'"
        case .missingField(let field): "service account file lacks '\(field)'"
        case .unreadablePrivateKey: "service account private_key is not an RSA private key in PEM form"
        }
    }
}
