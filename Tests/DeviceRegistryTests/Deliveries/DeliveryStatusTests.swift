import DeviceRegistry
import TestSupport
import Testing

/// `push_deliveries.status` read as ``DeliveryStatus``: every value the schema allows, and nothing else.
@Suite struct DeliveryStatusTests {
    @Test func theCasesAreTheStatusesTheSchemaAllows() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            try await expectCasesAreWhatTheSchemaAllows(DeliveryStatus.self, constraint: "push_deliveries_status_check", client)
        }
    }
}
