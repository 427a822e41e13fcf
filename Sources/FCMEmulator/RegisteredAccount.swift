import Foundation
import WireFormats
import _CryptoExtras

/// The public part of a Google service account: who may mint access tokens, with which key, for which project.
public struct RegisteredAccount: Sendable {
    public var clientEmail: String
    public var projectID: String
    public var publicKey: _RSA.Signing.PublicKey
    /// `private_key_id`; when set, an assertion's `kid` header must match it.
    public var keyID: String?

    public init(clientEmail: String, projectID: String, publicKey: _RSA.Signing.PublicKey, keyID: String? = nil) {
        self.clientEmail = clientEmail
        self.projectID = projectID
        self.publicKey = publicKey
        self.keyID = keyID
    }

    /// `publicKeyPEM` is a SubjectPublicKeyInfo (`BEGIN PUBLIC KEY`) or PKCS#1 (`BEGIN RSA PUBLIC KEY`) PEM.
    public init(clientEmail: String, projectID: String, publicKeyPEM: String, keyID: String? = nil) throws(RegisteredAccountError) {
        let publicKey: _RSA.Signing.PublicKey
        do {
            publicKey = try _RSA.Signing.PublicKey(pemRepresentation: publicKeyPEM)
        } catch {
            throw .invalidKey("public_key is not an RSA public key of at least 2048 bits in PEM form")
        }
        self.init(clientEmail: clientEmail, projectID: projectID, publicKey: publicKey, keyID: keyID)
    }

    /// Reads a Google service-account JSON file (`client_email`, `project_id`, `private_key`, `private_key_id`);
    /// the public key is derived from `private_key`. A `public_key` PEM may stand in for `private_key`, which is
    /// what the admin API accepts.
    public init(serviceAccountJSON: Data) throws(RegisteredAccountError) {
        let fieldNames = ["client_email", "project_id", "private_key", "private_key_id", "public_key"]
        guard let fields = JSONParser.object(serviceAccountJSON, strings: fieldNames) else { throw .malformedJSON }
        guard let clientEmail = fields["client_email"]?.string, !clientEmail.isEmpty else { throw .missingField("client_email") }
        guard let projectID = fields["project_id"]?.string, !projectID.isEmpty else { throw .missingField("project_id") }
        if let privateKeyPEM = fields["private_key"]?.string {
            do {
                let privateKey = try _RSA.Signing.PrivateKey(pemRepresentation: privateKeyPEM)
                self.init(
                    clientEmail: clientEmail, projectID: projectID, publicKey: privateKey.publicKey, keyID: fields["private_key_id"]?.string
                )
            } catch {
                throw .invalidKey("private_key is not an RSA private key of at least 2048 bits in PEM form")
            }
        } else if let publicKeyPEM = fields["public_key"]?.string {
            try self.init(
                clientEmail: clientEmail, projectID: projectID, publicKeyPEM: publicKeyPEM, keyID: fields["private_key_id"]?.string)
        } else {
            throw .missingField("private_key or public_key")
        }
    }
}

public enum RegisteredAccountError: Error, Equatable, CustomStringConvertible {
    case malformedJSON
    case missingField(String)
    case invalidKey(String)

    public var description: String {
        switch self {
        case .malformedJSON: "the service account is not a JSON object"
        case .missingField(let name): "the service account has no \(name)"
        case .invalidKey(let reason): reason
        }
    }
}
