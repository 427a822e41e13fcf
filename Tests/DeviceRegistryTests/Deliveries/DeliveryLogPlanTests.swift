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
                INSERT INTO push_deliveries (job_id, device_id, status, attempts, job_created_at, app_id)
                SELECT j.id, d.id, 'sent', 1, j.created_at, j.app_id FROM push_jobs j CROSS JOIN push_devices d
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
                let lines = try await Self.plan(of: filter, log: log, client: client)
                let plan = lines.joined(separator: "\n")
                // The others are pruned before planning: they are not in the plan at all.
                let read = lines.filter { $0.contains(" on push_deliveries_") }
                #expect(read.count == 1 && read[0].contains("push_deliveries_\(day)"), "\(plan)")
            }
        }
    }

    /// A page of a small app's deliveries behind a large app's campaign, and a page of failures
    /// since a recent time over days of older failures, each read through their own index: no
    /// partition's scan reads (or reads past) many more rows than the page. Before migration 016
    /// the app's page walked back through the large campaign, and the failures since a time read
    /// every day's failures.
    @Test func anAppsPageAndRecentFailuresReadTheirOwnRows() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            try await client.query("INSERT INTO apps (code, name) VALUES ('large', 'Large'), ('small', 'Small')")
            try await client.query(
                """
                INSERT INTO push_devices (user_id, app_id, token, platform)
                SELECT g, (SELECT id FROM apps WHERE code = CASE WHEN g <= 2000 THEN 'large' ELSE 'small' END), 'plan-token-' || g, 'android'
                  FROM generate_series(1, 2200) g
                """)
            try await client.query(
                "SELECT push_create_delivery_partition((now() AT TIME ZONE 'UTC')::date - g) FROM generate_series(1, 4) g")
            // A day each: the small app's campaign, then the large one's, its rows newer.
            try await client.query(
                """
                INSERT INTO push_jobs (app_id, status, message, audience_complete, created_at, started_at, finished_at)
                SELECT a.id, 'completed', '{}', true, now() - g * interval '1 day' - interval '1 hour' + a.id * interval '1 minute',
                       now() - g * interval '1 day', now()
                  FROM generate_series(0, 4) g CROSS JOIN (SELECT id FROM apps ORDER BY code DESC) a
                 ORDER BY g DESC, a.id DESC
                """)
            // A fifth of the older days' deliveries failed, a fiftieth of today's; each changed
            // a minute after its job was created.
            try await client.query(
                """
                INSERT INTO push_deliveries (job_id, device_id, status, attempts, job_created_at, app_id, updated_at)
                SELECT j.id, d.id,
                       CASE WHEN d.id % CASE WHEN j.created_at > now() - interval '1 day' THEN 50 ELSE 5 END = 0
                            THEN 'failed' ELSE 'sent' END,
                       1, j.created_at, j.app_id, j.created_at + interval '1 minute'
                  FROM push_jobs j JOIN push_devices d ON d.app_id = j.app_id
                 ORDER BY j.created_at, d.id
                """)
            try await client.query("ANALYZE push_deliveries")
            try await client.query("ANALYZE apps")
            let inTwoDays = try #require(
                try await client.query("SELECT to_char(now() AT TIME ZONE 'UTC' + interval '2 days', 'YYYYMMDD')").decode(String.self)
                    .first { _ in true })
            #expect(
                try await client.query("SELECT to_regclass('push_deliveries_\(unescaped: inTwoDays)') IS NOT NULL").decode(Bool.self).first
                { _ in true } == true)
            let log = DeliveryLog(client: client, logger: testLogger)
            let since = try #require(
                try await client.query("SELECT now() - interval '2 days 2 hours'").decode(Date.self).first { _ in true })
            for filter in [DeliveryFilter(appCode: "small"), DeliveryFilter(status: .failed, since: since)] {
                let plan = try await Self.plan(of: filter, log: log, client: client).joined(separator: "\n")
                let page = try await log.page(filter, below: nil, limit: 100)
                #expect(!page.deliveries.isEmpty, "\(filter)")
                #expect(QueryPlan.largestScan(of: "push_deliveries_", in: plan) <= 101, "\(filter):\n\(plan)")
                #expect(!plan.contains("push_deliveries_\(inTwoDays)"), "the days ahead are left out: \(plan)")
            }
        }
    }

    /// The first day changed since a time of that day is found by the day's updated_at index,
    /// never by reading the day: its rows lie in the order they were written, the changed ones
    /// last, and an EXISTS the planner answered with a sequential scan read most of the day (a
    /// second from disk at 100 million rows). Migration 017 asks each day for max(updated_at).
    @Test func theFirstDayChangedSinceATimeOfDayIsFoundByIndexAlone() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            try await client.query("INSERT INTO apps (code, name) VALUES ('wowa', 'Wowa')")
            try await client.query(
                """
                INSERT INTO push_devices (user_id, app_id, token, platform)
                SELECT g, (SELECT id FROM apps), 'plan-token-' || g, 'android' FROM generate_series(1, 20000) g
                """)
            try await client.query(
                "SELECT push_create_delivery_partition((now() AT TIME ZONE 'UTC')::date - g) FROM generate_series(1, 3) g")
            // Two days back, a campaign at midnight whose 20,000 deliveries changed through the
            // day, written in that order; the day before it and yesterday hold one delivery each.
            try await client.query(
                """
                INSERT INTO push_jobs (app_id, status, message, audience_complete, created_at, started_at, finished_at)
                SELECT (SELECT id FROM apps), 'completed', '{}', true, d, d, d + interval '23 hours'
                  FROM (SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - g * interval '1 day' AS d
                          FROM generate_series(1, 3) g) days
                """)
            try await client.query(
                """
                INSERT INTO push_deliveries (job_id, device_id, status, attempts, job_created_at, app_id, updated_at)
                SELECT j.id, v.id, 'sent', 1, j.created_at, j.app_id, j.created_at + v.id * interval '4 seconds'
                  FROM push_jobs j JOIN push_devices v
                    ON CASE WHEN j.created_at = (SELECT min(created_at) FROM push_jobs) + interval '1 day' THEN true ELSE v.id = 1 END
                 ORDER BY j.created_at, v.id
                """)
            try await client.query("ANALYZE push_deliveries")
            let (day, since) = try #require(
                try await client.query(
                    """
                    SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYYMMDD'), created_at + interval '12 hours'
                      FROM push_jobs ORDER BY created_at LIMIT 1 OFFSET 1
                    """
                ).decode((String, Date).self).first { _ in true })
            // A backend's counts since it last reported its statistics, which it does at most once a
            // second: they may still hold the partition's index builds (each counted as a sequential
            // scan) when this runs on the connection that created it. So the call is measured by the
            // difference.
            let (found, seqScans, indexScans) = try await DatabaseTransaction.run(client, logger: testLogger) { transaction in
                func scans() async throws -> (Int, Int) {
                    try #require(
                        try await transaction.query(
                            "SELECT seq_scan, idx_scan FROM pg_stat_xact_user_tables WHERE relname = \("push_deliveries_" + day)"
                        ).rows.first?.decode((Int, Int).self))
                }
                let before = try await scans()
                let found = try #require(
                    try await transaction.query("SELECT push_first_day_changed_since(\(since))").rows.first?.decode(Date.self))
                let after = try await scans()
                return (found, after.0 - before.0, after.1 - before.1)
            }
            #expect(found < since && since.timeIntervalSince(found) == 12 * 3600, "the day that holds since: \(found)")
            #expect(seqScans == 0 && indexScans >= 1, "the day was read by \(seqScans) sequential and \(indexScans) index scans")
        }
    }

    /// The audit statement's plan for a page of 100, as EXPLAIN ANALYZE prints it, a line each.
    static func plan(of filter: DeliveryFilter, log: DeliveryLog, client: PostgresClient) async throws -> [String] {
        let statement = try #require(try await log.statement(filter, below: nil, limit: 101))
        let explain = PostgresQuery(
            unsafeSQL: "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) " + statement.sql, binds: statement.binds)
        var lines: [String] = []
        for try await line in try await client.query(explain, logger: testLogger).decode(String.self) { lines.append(line) }
        return lines
    }
}
