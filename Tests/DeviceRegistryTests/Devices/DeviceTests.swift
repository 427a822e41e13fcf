import DeviceRegistry
import TestSupport
import Testing

/// `push_devices.platform` and `token_type` read as ``Platform`` and ``TokenType``: every value
/// the schema allows, and nothing else (an unknown platform is an error, never read as iOS).
@Suite struct DeviceTests {
    @Test func thePlatformsAreTheOnesTheSchemaAllows() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            try await expectCasesAreWhatTheSchemaAllows(Platform.self, constraint: "push_devices_platform_check", client)
        }
    }

    @Test func theTokenTypesAreTheOnesTheSchemaAllows() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            try await expectCasesAreWhatTheSchemaAllows(TokenType.self, constraint: "push_devices_token_type_check", client)
        }
    }
}
