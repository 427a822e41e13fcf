import DeviceRegistry
import Logging
import PostgresNIO
import TestSupport

let testLogger = Logger(label: "registry-tests")

/// Adds an app directly and returns its id.
func addApp(_ client: PostgresClient, code: String = "wowa") async throws -> Int64 {
    try await AppDirectory(client: client, logger: testLogger).add(code: code, name: code.capitalized, serviceAccount: nil).id
}

func registration(_ token: String, platform: String = "ios", deviceID: String? = nil, tokenType: String? = nil) throws -> DeviceRegistration {
    try DeviceRegistration(token: token, platform: platform, deviceID: deviceID, tokenType: tokenType)
}

/// (user_id, is_active, deactivation_reason) of every row for a token, by user.
func rows(_ client: PostgresClient, token: String) async throws -> [(Int64, Bool, String?)] {
    var result: [(Int64, Bool, String?)] = []
    for try await row in try await client.query(
        "SELECT user_id, is_active, deactivation_reason FROM push_devices WHERE token = \(token) ORDER BY user_id"
    ).decode((Int64, Bool, String?).self) {
        result.append(row)
    }
    return result
}

/// The user's active tokens in any app, sorted.
func activeTokens(_ client: PostgresClient, user: Int64) async throws -> [String] {
    var result: [String] = []
    for try await token in try await client.query(
        "SELECT token FROM push_devices WHERE user_id = \(user) AND is_active ORDER BY token"
    ).decode(String.self) {
        result.append(token)
    }
    return result
}
