import DeviceRegistry
import PostgresNIO
import Testing
import TestSupport

/// `push_jobs.priority` read as ``JobPriority``: every value the schema allows, and nothing else.
@Suite struct JobPriorityTests {
    @Test func theCasesAreWhatTheSchemaAllowsAndReadBack() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            #expect(try await allowedValues(client, constraint: "push_jobs_priority_check") == Set(JobPriority.allCases.map(\.rawValue)))
            try await expectRoundTrips(JobPriority.self, client)
        }
    }
}
