import DeviceRegistry
import Foundation
import Logging
import PostgresNIO
import TestSupport
import Testing

/// Migration 016 gives every delivery of a filled, partitioned log its job's app, keeps every
/// other column as it was, and from then on a delivery without its app is refused.
@Suite("Migration 016: deliveries by app and by time")
struct DeliveriesByAppAndTimeMigrationTests {
    static let version = "016_deliveries_by_app_and_time"

    @Test func everyRowGetsItsJobsApp() async throws {
        let bundled = try MigrationRunner.bundled()
        let before = MigrationRunner(migrations: bundled.migrations.filter { $0.version < Self.version })
        try #require(before.migrations.count < bundled.migrations.count)
        try await TestPostgres.shared.makeEmptyDatabase().withClient { client in
            try await before.run(on: client, logger: testLogger)
            // Two apps' campaigns over three days, one of them in the default partition (its day
            // has none), and a running one with pending rows.
            try await client.query("INSERT INTO apps (code, name) VALUES ('wowa', 'Wowa'), ('ohyo', 'Ohyo')")
            try await client.query(
                """
                INSERT INTO push_devices (user_id, app_id, token, platform)
                SELECT g, a.id, a.code || '-token-' || g, 'android' FROM generate_series(1, 500) g CROSS JOIN apps a
                """)
            try await client.query(
                "SELECT push_create_delivery_partition((now() AT TIME ZONE 'UTC')::date - g) FROM generate_series(1, 2) g")
            try await client.query(
                """
                INSERT INTO push_jobs (app_id, status, message, audience_complete, created_at, started_at, finished_at)
                SELECT a.id, CASE WHEN g = 0 THEN 'running' ELSE 'completed' END, '{}', true, now() - g * interval '1 day',
                       now() - g * interval '1 day', CASE WHEN g = 0 THEN NULL ELSE now() END
                  FROM generate_series(0, 3) g CROSS JOIN apps a
                """)
            try await client.query(
                """
                INSERT INTO push_deliveries (job_id, device_id, status, attempts, job_created_at, created_at, updated_at)
                SELECT j.id, d.id, CASE WHEN j.status = 'running' THEN 'pending' WHEN d.id % 7 = 0 THEN 'failed' ELSE 'sent' END,
                       1, j.created_at, j.created_at, j.created_at + interval '1 minute'
                  FROM push_jobs j JOIN push_devices d ON d.app_id = j.app_id
                """)
            #expect(try await Self.count(client, "SELECT count(*) FROM push_deliveries_default") == 1000)
            let rows = try await Self.fingerprint(client)
            #expect(rows.count == 4000)

            let applied = try await bundled.run(on: client, logger: testLogger)
            #expect(applied.first == Self.version)
            #expect(try await Self.fingerprint(client) == rows, "every other column as it was")
            #expect(
                try await Self.count(
                    client,
                    "SELECT count(*) FROM push_deliveries d JOIN push_jobs j ON j.id = d.job_id WHERE d.app_id IS DISTINCT FROM j.app_id"
                ) == 0)
            #expect(try await Self.count(client, "SELECT count(DISTINCT app_id) FROM push_deliveries") == 2)

            let refused = try #require(
                await #expect(throws: PSQLError.self) {
                    try await client.query(
                        """
                        INSERT INTO push_deliveries (job_id, device_id, job_created_at)
                        SELECT j.id, (SELECT max(id) FROM push_devices), j.created_at FROM push_jobs j WHERE j.status = 'running' LIMIT 1
                        """)
                })
            #expect(DatabaseErrorText.sqlState(refused)?.raw == "23502", "a delivery without its app is refused")
        }
    }

    /// Every row with every column it had before the migration, in id order.
    static func fingerprint(_ client: PostgresClient) async throws -> [String] {
        let query: PostgresQuery = """
            SELECT concat_ws('|', id, job_id, device_id, status, error_code, error_message, fcm_message_id, attempts,
                             next_attempt_at, lease_owner, created_at, updated_at, job_created_at, tableoid::regclass)
              FROM push_deliveries ORDER BY id
            """
        var rows: [String] = []
        for try await row in try await client.query(query, logger: testLogger).decode(String.self) { rows.append(row) }
        return rows
    }

    static func count(_ client: PostgresClient, _ query: PostgresQuery) async throws -> Int64 {
        for try await value in try await client.query(query, logger: testLogger).decode(Int64.self) { return value }
        return -1
    }
}
