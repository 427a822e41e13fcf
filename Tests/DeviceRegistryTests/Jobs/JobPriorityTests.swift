import DeviceRegistry
import PostgresNIO
import TestSupport
import Testing

/// `push_jobs.priority` read as ``JobPriority``: every value the schema allows, and nothing else.
@Suite struct JobPriorityTests {
    @Test func theCasesAreWhatTheSchemaAllowsAndReadBack() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            try await expectCasesAreWhatTheSchemaAllows(JobPriority.self, constraint: "push_jobs_priority_check", client)
        }
    }
}
