import DeviceRegistry
import Logging
import PostgresNIO
import TestSupport
import Testing

let testLogger = Logger(label: "registry-tests")

/// Adds an app directly and returns its id.
func addApp(_ client: PostgresClient, code: String = "wowa") async throws -> Int64 {
    try await AppDirectory(client: client, logger: testLogger).add(code: code, name: code.capitalized, serviceAccount: nil).id
}

func registration(_ token: String, platform: String = "ios", deviceID: String? = nil, tokenType: String? = nil) throws -> DeviceRegistration
{
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

/// The quoted words of a CHECK constraint of the migrated schema: the values it allows.
func allowedValues(_ client: PostgresClient, constraint: String) async throws -> Set<String> {
    var values: Set<String> = []
    for try await value in try await client.query(
        """
        SELECT unnest(regexp_matches(pg_get_constraintdef(oid), '''(\\w+)''', 'g')) FROM pg_constraint WHERE conname = \(constraint)
        """
    ).decode(String.self) {
        values.insert(value)
    }
    return values
}

/// `Value`'s cases are exactly the values `constraint` allows, and each reads back as itself.
func expectCasesAreWhatTheSchemaAllows<Value: TextColumnEnum & Equatable>(
    _ type: Value.Type, constraint: String, _ client: PostgresClient,
    sourceLocation: SourceLocation = #_sourceLocation
) async throws {
    #expect(try await allowedValues(client, constraint: constraint) == Set(Value.allCases.map(\.rawValue)), sourceLocation: sourceLocation)
    try await expectRoundTrips(type, client)
}

/// Every case of `Value`, bound and read back through the database; an unknown spelling fails
/// the row's decoding.
func expectRoundTrips<Value: TextColumnEnum & Equatable>(_ type: Value.Type, _ client: PostgresClient) async throws {
    for value in Value.allCases {
        for try await decoded in try await client.query("SELECT \(value)::text").decode(Value.self) {
            #expect(decoded == value)
        }
    }
    await #expect(throws: PostgresDecodingError.self) {
        for try await _ in try await client.query("SELECT 'not-a-case'::text").decode(Value.self) {}
    }
}
