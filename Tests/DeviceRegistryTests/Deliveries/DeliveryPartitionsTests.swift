import DeviceRegistry
import Foundation
import Logging
import PostgresNIO
import TestSupport
import Testing

/// The delivery log's day partitions (sql/015) against PostgreSQL: created a week ahead, rows of
/// the default partition moved into their day's, and old days dropped with their jobs, never a
/// day whose jobs have not ended.
@Suite("The delivery log's day partitions")
struct DeliveryPartitionsTests {
    /// `push_deliveries_YYYYMMDD` of the UTC day `offset` days from today.
    static func partition(_ offset: Int) -> PostgresQuery {
        "SELECT 'push_deliveries_' || to_char((now() AT TIME ZONE 'UTC')::date + \(offset)::int, 'YYYYMMDD')"
    }

    /// `YYYY-MM-DD` of the UTC day `offset` days from today.
    static func day(_ offset: Int) -> PostgresQuery {
        "SELECT to_char((now() AT TIME ZONE 'UTC')::date + \(offset)::int, 'YYYY-MM-DD')"
    }

    static func text(_ client: PostgresClient, _ query: PostgresQuery) async throws -> String {
        for try await value in try await client.query(query, logger: testLogger).decode(String.self) { return value }
        return ""
    }

    /// The day partitions, the rows of each table retention touches, and the jobs by id: what
    /// "changes nothing" compares.
    static func snapshot(_ client: PostgresClient) async throws -> String {
        try await text(
            client,
            """
            SELECT concat_ws(' | ',
                (SELECT string_agg(c.relname, ',' ORDER BY c.relname) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
                  WHERE i.inhparent = 'push_deliveries'::regclass),
                (SELECT string_agg(id::text || ':' || status, ',' ORDER BY id) FROM push_jobs),
                (SELECT count(*) FROM push_deliveries), (SELECT count(*) FROM push_job_chunks))
            """)
    }

    /// An app with three devices; a job of `status` created `daysAgo` days ago (its day's
    /// partition made first, unless `partition` is false) with a row per device unless `rows`
    /// is false. Returns the job's id.
    @discardableResult
    static func job(
        _ client: PostgresClient, daysAgo: Int, status: String, rows: Bool = true, partition: Bool = true, idempotencyKey: String? = nil
    ) async throws -> Int64 {
        if try await count(client, "SELECT count(*)::int FROM apps") == 0 {
            _ = try await addApp(client)
            try await client.query(
                "INSERT INTO push_devices (user_id, app_id, token, platform) SELECT g, (SELECT id FROM apps), 'tok-' || g, 'android' FROM generate_series(1, 3) g"
            )
        }
        if partition {
            try await client.query(
                "SELECT push_create_delivery_partition(((now() - make_interval(days => \(daysAgo)::int)) AT TIME ZONE 'UTC')::date)")
        }
        let ended = !["queued", "running"].contains(status)
        var job: Int64 = 0
        for try await id in try await client.query(
            """
            INSERT INTO push_jobs (app_id, message, status, idempotency_key, created_at, finished_at)
            VALUES ((SELECT id FROM apps), '{}', \(status), \(idempotencyKey), now() - make_interval(days => \(daysAgo)::int),
                    CASE WHEN \(ended) THEN now() END)
            RETURNING id
            """
        ).decode(Int64.self) {
            job = id
        }
        if rows {
            try await client.query(
                """
                INSERT INTO push_deliveries (job_id, device_id, status, job_created_at, app_id)
                SELECT \(job), d.id, 'sent', j.created_at, j.app_id FROM push_devices d, push_jobs j WHERE j.id = \(job)
                """)
        }
        return job
    }

    /// A chunk of `job` whose lease runs out `leaseSeconds` from now (negative: its worker is gone).
    static func chunk(_ client: PostgresClient, job: Int64, leaseSeconds: Int) async throws {
        try await client.query(
            """
            INSERT INTO push_job_chunks (job_id, device_ids, lease_owner, lease_until)
            VALUES (\(job), ARRAY[(SELECT min(id) FROM push_devices)], 'worker-a', now() + make_interval(secs => \(leaseSeconds)::int))
            """)
    }

    @Test func todayAndTheWeekAheadAreCreatedOnce() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let partitions = DeliveryPartitions(client: client, logger: testLogger)
            var missing: [String] = []
            for offset in 5...7 {
                let name = try await Self.text(client, Self.partition(offset))
                try await client.query("DROP TABLE IF EXISTS \(unescaped: name)")
                missing.append(name)
            }
            #expect(try await partitions.createAhead() == missing)
            #expect(try await partitions.createAhead() == [], "a second run creates nothing")
            for offset in 0...7 {
                let name = try await Self.text(client, Self.partition(offset))
                #expect(
                    try await count(client, "SELECT count(*)::int FROM pg_class WHERE relname = \(name) AND relispartition") == 1, "\(name)"
                )
            }
            let beyond = try await Self.text(client, Self.partition(8))
            #expect(try await count(client, "SELECT count(*)::int FROM pg_class WHERE relname = \(beyond)") == 0)
        }
    }

    @Test func rowsOfADayWithoutItsPartitionWaitInTheDefaultOneAndMoveWhenItIsCreated() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let name = try await Self.text(client, Self.partition(3))
            try await client.query("DROP TABLE \(unescaped: name)")
            // A job of that day (as if the programs had not run for days before it was queued).
            let job = try await Self.job(client, daysAgo: -3, status: "running", partition: false)
            let placed: PostgresQuery =
                "SELECT string_agg(tableoid::regclass::text || ':' || id, ',' ORDER BY id) FROM push_deliveries WHERE job_id = \(job)"
            let before = try await Self.text(client, placed)
            #expect(
                before.split(separator: ",").count == 3
                    && before.split(separator: ",").allSatisfy { $0.hasPrefix("push_deliveries_default:") })

            #expect(try await DeliveryPartitions(client: client, logger: testLogger).createAhead() == [name])
            let after = try await Self.text(client, placed)
            #expect(
                after == before.replacingOccurrences(of: "push_deliveries_default:", with: "\(name):"),
                "the same rows, in the day's partition")
            #expect(try await count(client, "SELECT count(*)::int FROM push_deliveries_default") == 0)
            // The moved rows are the log as before: unique per device, and new ones go to the partition.
            await #expect(throws: PSQLError.self) {
                try await client.query(
                    "INSERT INTO push_deliveries (job_id, device_id, job_created_at, app_id) SELECT job_id, device_id, job_created_at, app_id FROM push_deliveries WHERE job_id = \(job) LIMIT 1"
                )
            }
        }
    }

    /// Days as the 30-day retention sees them: 45 days ago a job older than the log (no
    /// partition, no rows); 40 days ago two ended jobs, one with a chunk its crashed worker
    /// left; 39 days ago a running job; 35 days ago an ended job with a chunk still leased;
    /// 10 days ago an ended job.
    static func oldDays(_ client: PostgresClient) async throws -> (ended: [Int64], kept: [Int64]) {
        let beforeTheLog = try await job(client, daysAgo: 45, status: "completed", rows: false, partition: false)
        let completed = try await job(client, daysAgo: 40, status: "completed", idempotencyKey: "daily-digest")
        let failed = try await job(client, daysAgo: 40, status: "failed")
        try await chunk(client, job: failed, leaseSeconds: -60)
        let running = try await job(client, daysAgo: 39, status: "running")
        let inFlight = try await job(client, daysAgo: 35, status: "cancelled")
        try await chunk(client, job: inFlight, leaseSeconds: 60)
        let recent = try await job(client, daysAgo: 10, status: "completed")
        try await client.query("ANALYZE push_deliveries")
        return ([beforeTheLog, completed, failed], [running, inFlight, recent])
    }

    @Test func aDryRunListsTheOldDaysAndChangesNothing() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            _ = try await Self.oldDays(client)
            let before = try await Self.snapshot(client)
            let listed = try await DeliveryPartitions(client: client, logger: testLogger).dropDays(olderThan: 30, dryRun: true)
            #expect(
                listed == [
                    OldDeliveryDay(day: try await Self.text(client, Self.day(-45)), estimatedDeliveries: 0, jobs: 1, outcome: .wouldDrop),
                    OldDeliveryDay(day: try await Self.text(client, Self.day(-40)), estimatedDeliveries: 6, jobs: 2, outcome: .wouldDrop),
                    OldDeliveryDay(
                        day: try await Self.text(client, Self.day(-39)), estimatedDeliveries: 3, jobs: 1,
                        outcome: .kept(because: "1 of its jobs queued or running")),
                    OldDeliveryDay(
                        day: try await Self.text(client, Self.day(-35)), estimatedDeliveries: 3, jobs: 1,
                        outcome: .kept(because: "1 of its ended jobs with sends in flight")),
                ])
            #expect(try await Self.snapshot(client) == before)
        }
    }

    @Test func anOldDayOfEndedJobsGoesWithItsJobsAndTheirChunksAndADayWithAJobNotEndedStays() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let (ended, kept) = try await Self.oldDays(client)
            let fortyDaysAgo = try await Self.text(client, Self.partition(-40))
            let dropped = try await DeliveryPartitions(client: client, logger: testLogger).dropDays(olderThan: 30, dryRun: false)
            #expect(
                dropped.map(\.outcome) == [
                    .dropped, .dropped, .kept(because: "1 of its jobs queued or running"),
                    .kept(because: "1 of its ended jobs with sends in flight"),
                ])

            #expect(
                try await count(client, "SELECT count(*)::int FROM pg_class WHERE relname = \(fortyDaysAgo)") == 0, "the partition is gone")
            #expect(try await count(client, "SELECT count(*)::int FROM push_jobs WHERE id = ANY(\(ended))") == 0)
            #expect(try await count(client, "SELECT count(*)::int FROM push_job_chunks WHERE job_id = ANY(\(ended))") == 0)
            #expect(try await count(client, "SELECT count(*)::int FROM push_jobs WHERE id = ANY(\(kept))") == 3)
            #expect(try await count(client, "SELECT count(*)::int FROM push_deliveries WHERE job_id = ANY(\(kept))") == 9)
            #expect(try await count(client, "SELECT count(*)::int FROM push_job_chunks") == 1, "the leased chunk stays")
            // The idempotency key went with its job: the key now queues a new job.
            let again = try await count(
                client, "SELECT push_enqueue('wowa', ARRAY[1]::bigint[], '{\"notification\":{\"title\":\"Hi\"}}', 'daily-digest')::int")
            #expect(!ended.contains(Int64(again)))

            // Once its job ended and the chunk is done, the kept days go at the next run.
            try await client.query("DELETE FROM push_job_chunks")
            try await client.query("UPDATE push_jobs SET status = 'completed', finished_at = now() WHERE id = \(kept[0])")
            let next = try await DeliveryPartitions(client: client, logger: testLogger).dropDays(olderThan: 30, dryRun: false)
            #expect(next.map(\.outcome) == [.dropped, .dropped])
            #expect(try await count(client, "SELECT count(*)::int FROM push_jobs WHERE id = ANY(\(kept))") == 1, "the recent job stays")
        }
    }

    @Test func aRetentionUnderADayIsRefusedAndChangesNothing() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            _ = try await Self.oldDays(client)
            let before = try await Self.snapshot(client)
            let refused = try #require(
                await #expect(throws: PSQLError.self) {
                    try await DeliveryPartitions(client: client, logger: testLogger).dropDays(olderThan: 0, dryRun: false)
                })
            #expect(DatabaseErrorText.sqlState(refused)?.raw == "22023")
            #expect(DatabaseErrorText.describe(refused) == "retention must be at least 1 day, not 00:00:00")
            for retention in ["23 hours", "-30 days"] {
                let error = try #require(
                    await #expect(throws: PSQLError.self) {
                        try await DatabaseStatement.run(
                            "SELECT * FROM push_drop_old_deliveries(\(retention)::interval)", on: client, logger: testLogger)
                    })
                #expect(DatabaseErrorText.sqlState(error)?.raw == "22023", "\(retention)")
            }
            #expect(try await Self.snapshot(client) == before)
        }
    }
}
