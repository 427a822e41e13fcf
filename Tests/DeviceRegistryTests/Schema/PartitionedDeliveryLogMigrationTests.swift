import DeviceRegistry
import Foundation
import Logging
import PostgresNIO
import TestSupport
import Testing

/// Migration 015 turns an installation's filled, unpartitioned delivery log into the day-
/// partitioned one without losing or changing a row, and the log goes on working after it.
@Suite("Migration 015: the delivery log partitioned by day")
struct PartitionedDeliveryLogMigrationTests {
    static let version = "015_partitioned_delivery_log"

    @Test func aFilledLogIsConvertedRowForRow() async throws {
        let bundled = try MigrationRunner.bundled()
        let before = MigrationRunner(migrations: bundled.migrations.filter { $0.version < Self.version })
        try #require(before.migrations.count < bundled.migrations.count)
        try await TestPostgres.shared.makeEmptyDatabase().withClient { client in
            try await before.run(on: client, logger: testLogger)
            // Four days of finished campaigns, 3,000 devices each, and today's, still running:
            // sent, failed, skipped and pending rows, one of them leased.
            try await client.query(
                """
                INSERT INTO apps (code, name) VALUES ('wowa', 'Wowa')
                """)
            try await client.query(
                """
                INSERT INTO push_devices (user_id, app_id, token, platform)
                SELECT g, (SELECT id FROM apps), 'migrated-token-' || g, 'android' FROM generate_series(1, 3000) g
                """)
            try await client.query(
                """
                INSERT INTO push_jobs (app_id, status, message, audience_complete, created_at, started_at, finished_at)
                SELECT (SELECT id FROM apps), CASE WHEN g = 0 THEN 'running' ELSE 'completed' END, '{}', true,
                       now() - g * interval '1 day', now() - g * interval '1 day', CASE WHEN g = 0 THEN NULL ELSE now() END
                  FROM generate_series(0, 4) g
                """)
            try await client.query(
                """
                INSERT INTO push_deliveries (job_id, device_id, status, error_code, attempts, fcm_message_id, lease_owner, created_at, updated_at)
                SELECT j.id, d.id,
                       CASE WHEN j.status = 'running' AND d.id % 3 = 0 THEN 'pending'
                            WHEN d.id % 7 = 0 THEN 'failed' WHEN d.id % 11 = 0 THEN 'skipped' ELSE 'sent' END,
                       CASE WHEN d.id % 7 = 0 THEN 'UNREGISTERED' END, 1 + d.id % 3, 'projects/p/messages/' || d.id,
                       CASE WHEN j.status = 'running' AND d.id = 3 THEN 'worker-a' END,
                       j.created_at + interval '1 minute', j.created_at + interval '2 minutes'
                  FROM push_jobs j CROSS JOIN push_devices d
                """)
            let rows = try await Self.fingerprint(client)
            #expect(rows.count == 15_000)

            let applied = try await bundled.run(on: client, logger: testLogger)
            #expect(applied.first == Self.version)
            #expect(try await Self.fingerprint(client) == rows, "every row kept, every column as it was")
            // Each row sits in its job's day, none in the default partition, and the days ahead
            // exist already.
            #expect(
                try await count(
                    client,
                    "SELECT count(*)::int FROM push_deliveries d JOIN push_jobs j ON j.id = d.job_id WHERE d.job_created_at <> j.created_at"
                ) == 0)
            #expect(try await count(client, "SELECT count(*)::int FROM push_deliveries_default") == 0)
            #expect(
                try await count(
                    client,
                    """
                    SELECT count(DISTINCT tableoid)::int FROM push_deliveries
                    """) == 5)
            #expect(
                try await count(
                    client,
                    """
                    SELECT count(*)::int FROM generate_series(0, 7) g
                     WHERE to_regclass('push_deliveries_' || to_char(now() AT TIME ZONE 'UTC' + g * interval '1 day', 'YYYYMMDD')) IS NOT NULL
                    """) == 8)

            // It goes on working: new ids follow the old ones, a job's device once, and the
            // status check holds.
            let job = try await Self.value(client, "SELECT id FROM push_jobs WHERE status = 'running'")
            let newID = try await Self.value(
                client,
                """
                INSERT INTO push_deliveries (job_id, device_id, job_created_at, app_id)
                SELECT \(job), (SELECT max(id) FROM push_devices), created_at, app_id FROM push_jobs WHERE id = \(job)
                    ON CONFLICT ON CONSTRAINT push_deliveries_job_device_key DO NOTHING
                RETURNING id
                """)
            #expect(newID == 0, "the device had a row of that job already: nothing inserted")
            try await client.query("DELETE FROM push_deliveries WHERE job_id = \(job) AND device_id = (SELECT max(id) FROM push_devices)")
            let reinserted = try await Self.value(
                client,
                """
                INSERT INTO push_deliveries (job_id, device_id, job_created_at, app_id)
                SELECT \(job), (SELECT max(id) FROM push_devices), created_at, app_id FROM push_jobs WHERE id = \(job) RETURNING id
                """)
            #expect(reinserted > rows.last?.id ?? .max)
            let refused = try #require(
                await #expect(throws: PSQLError.self) {
                    try await client.query("UPDATE push_deliveries SET status = 'lost' WHERE id = \(reinserted)")
                })
            #expect(DatabaseErrorText.sqlState(refused)?.raw == "23514")
        }
    }

    struct Row: Equatable, Sendable {
        let id: Int64
        let text: String
    }

    /// Every row with every column of the old table, in id order.
    static func fingerprint(_ client: PostgresClient) async throws -> [Row] {
        var rows: [Row] = []
        let query: PostgresQuery = """
            SELECT id, concat_ws('|', job_id, device_id, status, error_code, error_message, fcm_message_id, attempts,
                                 next_attempt_at, lease_owner, created_at, updated_at)
              FROM push_deliveries ORDER BY id
            """
        for try await (id, text) in try await client.query(query, logger: testLogger).decode((Int64, String).self) {
            rows.append(Row(id: id, text: text))
        }
        return rows
    }

    /// The first column of the first row, 0 without one.
    static func value(_ client: PostgresClient, _ query: PostgresQuery) async throws -> Int64 {
        for try await value in try await client.query(query, logger: testLogger).decode(Int64.self) { return value }
        return 0
    }
}
