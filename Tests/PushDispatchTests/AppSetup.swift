import DeviceRegistry
import PostgresNIO

// This file imports DeviceRegistry but not FCMEmulator: both modules name a type
// ServiceAccount, and the module DeviceRegistry is shadowed by its struct of that name.

/// Adds an app with these service-account credentials (or none) and returns its id.
func addApp(_ client: PostgresClient, code: String, projectID: String?, clientEmail: String?, privateKeyPEM: String?, privateKeyID: String?) async throws -> Int64 {
    let account = projectID.flatMap { project in
        clientEmail.flatMap { email in privateKeyPEM.map { ServiceAccount(projectID: project, clientEmail: email, privateKeyPEM: $0, privateKeyID: privateKeyID) } }
    }
    return try await AppDirectory(client: client, logger: workerLogger).add(code: code, name: code, serviceAccount: account).id
}
