import Foundation
import PostgresNIO
import TestSupport
import Testing

@testable import DeviceRegistry

/// The audit's plans over a log of several days' partitions: a job's deliveries are read in its
/// day's partition alone, whatever the other filters, and the others are not even planned.
@Suite("DeliveryLog's plans")
struct DeliveryLogPlanTests {
    @Test func aJobsAuditReadsItsDaysPartitionOnly() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            try await client.query("INSERT INTO apps (code, name) VALUES ('wowa', 'Wowa')")
            try await client.query(
                """
                INSERT INTO push_devices (user_id, app_id, token, platform)
                SELECT g, (SELECT id FROM apps), 'plan-token-' || g, 'android' FROM generate_series(1, 2000) g
                """)
            try await client.query(
                """
                SELECT push_create_delivery_partition((now() AT TIME ZONE 'UTC')::date - g) FROM generate_series(1, 4) g
                """)
            try await client.query(
                """
                INSERT INTO push_jobs (app_id, status, message, audience_complete, created_at, started_at, finished_at)
                SELECT (SELECT id FROM apps), 'completed', '{}', true, now() - g * interval '1 day', now() - g * interval '1 day', now()
                  FROM generate_series(0, 4) g
                """)
            try await client.query(
                """
                INSERT INTO push_deliveries (job_id, device_id, status, attempts, job_created_at)
                SELECT j.id, d.id, 'sent', 1, j.created_at FROM push_jobs j CROSS JOIN push_devices d
                """)
            try await client.query("ANALYZE push_deliveries")
            let job = try #require(
                try await client.query("SELECT id FROM push_jobs ORDER BY created_at LIMIT 1 OFFSET 2").decode(Int64.self).first { _ in true
                })
            let day = try #require(
                try await client.query("SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYYMMDD') FROM push_jobs WHERE id = \(job)")
                    .decode(String.self).first { _ in true })
            let log = DeliveryLog(client: client, logger: testLogger)
            for filter in [
                DeliveryFilter(jobID: job), DeliveryFilter(jobID: job, userID: 7), DeliveryFilter(jobID: job, status: .sent),
            ] {
                let statement = log.statement(filter, jobDay: try await log.creationDay(ofJob: job), below: nil, limit: 101)
                var lines: [String] = []
                let explain = PostgresQuery(
                    unsafeSQL: "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) " + statement.sql, binds: statement.binds)
                for try await line in try await client.query(explain, logger: testLogger).decode(String.self) { lines.append(line) }
                let plan = lines.joined(separator: "\n")
                // The others are pruned before planning: they are not in the plan at all.
                let read = lines.filter { $0.contains(" on push_deliveries_") }
                #expect(read.count == 1 && read[0].contains("push_deliveries_\(day)"), "\(plan)")
            }
        }
    }
}
