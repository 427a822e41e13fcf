import DeviceRegistry
import Testing
import TestSupport

/// `push_devices.platform` and `token_type` read as ``Platform`` and ``TokenType``: every value
/// the schema allows, and nothing else (an unknown platform no longer reads as iOS).
@Suite struct DeviceTests {
    @Test func thePlatformsAreTheOnesTheSchemaAllows() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            #expect(try await allowedValues(client, constraint: "push_devices_platform_check") == Set(Platform.allCases.map(\.rawValue)))
            try await expectRoundTrips(Platform.self, client)
        }
    }

    @Test func theTokenTypesAreTheOnesTheSchemaAllows() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            #expect(try await allowedValues(client, constraint: "push_devices_token_type_check") == Set(TokenType.allCases.map(\.rawValue)))
            try await expectRoundTrips(TokenType.self, client)
        }
    }
}
