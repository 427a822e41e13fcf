import DeviceRegistry
import TestSupport
import Testing

/// `push_jobs.status` read as ``JobStatus``: every value the schema allows, and nothing else.
@Suite struct JobStatusTests {
    @Test func theCasesAreTheStatusesTheSchemaAllows() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            try await expectCasesAreWhatTheSchemaAllows(JobStatus.self, constraint: "push_jobs_status_check", client)
        }
    }

    /// push_jobs_finished: a job has its finished_at exactly in these statuses.
    @Test func theFinishedStatusesAreTheOnesWithAFinishedAt() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let allowed = try await allowedValues(client, constraint: "push_jobs_finished")
            #expect(allowed == Set(JobStatus.finished.map(\.rawValue)))
        }
        #expect(JobStatus.allCases.filter(\.isFinished) == JobStatus.finished)
    }
}
