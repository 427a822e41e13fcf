import DeviceRegistry
import PostgresNIO
import TestSupport
import Testing

/// Migration 023 lists the cancelled and failed jobs that earlier endings left with pending
/// deliveries, so that push-worker settles them too; running and finished jobs are not listed.
@Suite("Migration 023: deliveries held at an ending")
struct DeliveriesHeldAtAnEndingMigrationTests {
    static let version = "023_deliveries_held_at_an_ending"

    @Test func earlierEndingsLeftoversAreListedAndThenSettled() async throws {
        let bundled = try MigrationRunner.bundled()
        let before = MigrationRunner(migrations: bundled.migrations.filter { $0.version < Self.version })
        try #require(before.migrations.count < bundled.migrations.count)
        try await TestPostgres.shared.makeEmptyDatabase().withClient { client in
            try await before.run(on: client, logger: testLogger)
            try await client.query("INSERT INTO apps (code, name) VALUES ('wowa', 'Wowa')")
            try await client.query(
                "INSERT INTO push_devices (user_id, app_id, token, platform) SELECT g, a.id, 'tok-' || g, 'ios' FROM generate_series(1, 4) g, apps a"
            )
            // A cancelled job and a failed one each with a row a stopped worker held, a running
            // job with a retry waiting, a cancelled one with nothing pending.
            try await client.query(
                """
                INSERT INTO push_jobs (app_id, status, message, audience_complete, last_error, started_at, finished_at)
                SELECT a.id, s.status, '{}', true, CASE WHEN s.status = 'failed' THEN 'UNAUTHENTICATED: no' END, now(),
                       CASE WHEN s.status <> 'running' THEN now() END
                  FROM apps a, unnest(ARRAY['cancelled', 'failed', 'running', 'cancelled']) WITH ORDINALITY AS s(status, n) ORDER BY s.n
                """)
            try await client.query(
                """
                INSERT INTO push_deliveries (job_id, device_id, status, job_created_at, app_id, lease_owner, next_attempt_at)
                SELECT j.id, j.id, CASE WHEN j.id = 4 THEN 'skipped' ELSE 'pending' END, j.created_at, j.app_id,
                       CASE WHEN j.id < 3 THEN 'gone-worker' END, now() - interval '1 minute'
                  FROM push_jobs j
                """)
            #expect(try await bundled.run(on: client, logger: testLogger).first == Self.version)
            var listed: [Int64] = []
            for try await job in try await client.query("SELECT job_id FROM push_jobs_held_at_ending ORDER BY 1").decode(Int64.self) {
                listed.append(job)
            }
            #expect(listed == [1, 2])
            #expect(try await JobDirectory(client: client, logger: testLogger).settleHeldAtEndings() == 2)
            #expect(try await JobDirectory(client: client, logger: testLogger).settleHeldAtEndings() == 0)
            #expect(try await count(client, "SELECT count(*)::int FROM push_deliveries WHERE status = 'pending'") == 1)
            #expect(try await count(client, "SELECT count(*)::int FROM push_jobs_held_at_ending") == 0)
        }
    }
}
