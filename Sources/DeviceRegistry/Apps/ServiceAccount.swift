import Foundation
import WireFormats
import _CryptoExtras

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

    private static let projectIDBytes = Set("abcdefghijklmnopqrstuvwxyz0123456789-.:".utf8)

    /// Reads a service-account JSON as downloaded from the Firebase console and checks that the
    /// key is a usable RSA private key, so a broken file is refused now rather than at send time.
    public init(json data: Data) throws(ServiceAccountError) {
        let value: JSONValue
        do {
            value = try JSONParser.parse(data)
        } catch {
            throw .notJSON(error)
        }
        guard case .object(let members) = value else { throw .notAnObject }
        func string(_ field: String) throws(ServiceAccountError) -> String? {
            switch members[field] {
            case nil, .null?: return nil
            case .string(let value)?:
                // No key or address has one.
                guard !value.holdsNUL else { throw .holdsNUL(field) }
                return value
            default: throw .notAString(field)
            }
        }
        if let type = try string("type"), type != "service_account" { throw .wrongType(type) }
        guard let projectID = try string("project_id"), !projectID.isEmpty else { throw .missingField("project_id") }
        // It becomes part of FCM's URL: Google's project ids (and the older domain-scoped ones,
        // `example.com:project`) are lowercase letters, digits, '-', '.' and ':'.
        guard projectID.utf8.count <= 100, projectID.utf8.allSatisfy(Self.projectIDBytes.contains) else {
            throw .invalidProjectID
        }
        guard let clientEmail = try string("client_email"), clientEmail.contains("@") else { throw .missingField("client_email") }
        guard let key = try string("private_key"), !key.isEmpty else { throw .missingField("private_key") }
        do {
            _ = try _RSA.Signing.PrivateKey(pemRepresentation: key)
        } catch {
            throw .unreadablePrivateKey
        }
        self.init(
            projectID: projectID, clientEmail: clientEmail, privateKeyPEM: key,
            privateKeyID: try string("private_key_id").flatMap { $0.isEmpty ? nil : $0 })
    }
}

public enum ServiceAccountError: Error, CustomStringConvertible, Equatable {
    case notJSON(JSONSyntaxError)
    case notAnObject
    case notAString(String)
    case wrongType(String)
    case missingField(String)
    case unreadablePrivateKey
    case holdsNUL(String)
    case invalidProjectID

    public var description: String {
        switch self {
        case .notJSON(let syntax): "service account file is not valid JSON: \(syntax)"
        case .notAnObject: "service account file is not a JSON object"
        case .notAString(let field): "service account file's '\(field)' is not a string"
        case .wrongType(let type): "service account file has type '\(type)', expected 'service_account'"
        case .missingField(let field): "service account file lacks '\(field)'"
        case .unreadablePrivateKey: "service account private_key is not an RSA private key in PEM form"
        case .holdsNUL(let field): "service account file's '\(field)' contains a NUL character (\\u0000)"
        case .invalidProjectID: "service account file's 'project_id' must be 1 to 100 lowercase letters, digits, '-', '.' or ':'"
        }
    }
}
