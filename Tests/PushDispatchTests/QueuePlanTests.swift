import DeviceRegistry
import Foundation
import Logging
import PostgresNIO
import TestSupport
import Testing

@testable import PushDispatch

/// The queue's plans must not depend on statistics: during a big campaign they are always stale.
@Suite("The queue's plans")
struct QueuePlanTests {
    /// A table whose statistics say "everything was sent" (an earlier campaign, analyzed) and
    /// that then gets 20,000 pending deliveries the planner does not know about: the claim still
    /// reads push_deliveries_claimable in order and sorts nothing. Before migration 005 and the
    /// per-row job check it read every pending row of the job and sorted them all, on disk.
    /// A job made yesterday is running too, so the claim reads two days' partitions.
    @Test func theClaimReadsTheClaimableIndexInOrderWhateverTheStatistics() async throws {
        let plan = try await Self.withStaleStatistics { client, queue in
            try await client.query("SELECT push_create_delivery_partition((now() AT TIME ZONE 'UTC')::date - 1)")
            try await client.query(
                """
                WITH job AS (INSERT INTO push_jobs (app_id, status, message, audience_complete, started_at, created_at)
                             SELECT app_id, 'running', '{}', true, now(), now() - interval '1 day' FROM push_jobs LIMIT 1
                             RETURNING id, created_at, app_id)
                INSERT INTO push_deliveries (job_id, device_id, job_created_at, app_id)
                SELECT job.id, d.id, job.created_at, job.app_id FROM job, push_devices d
                """)
            let span = try #require(try await queue.runningJobsSpan())
            let claim = queue.claimStatement(limit: 128, excludingApps: [], jobsCreated: span)
            return try await DatabaseTransaction.run(client, logger: Logger(label: "test")) { transaction in
                try await transaction.query(DeliveryQueue.claimPlanSetting)
                return try await transaction.query(PostgresQuery(unsafeSQL: "EXPLAIN " + claim.sql, binds: claim.binds))
                    .map { try $0.decode(String.self) }.joined(separator: "\n")
            }
        }
        // push_deliveries_claimable as each day's partition has it, merged in its order.
        #expect(plan.contains("_next_attempt_at_id_idx on push_deliveries_"), "\(plan)")
        #expect(plan.contains("Merge Append"), "\(plan)")
        #expect(!plan.contains("Sort  (") && !plan.contains("Incremental Sort"), "\(plan)")
    }

    /// Expanding the next chunks of a campaign reads the app's active devices in id order from
    /// the job's cursor and stops at the claim's size: it never sorts the app's devices, whatever
    /// their number (each claim of a million-device campaign costs the same); only the claimed
    /// rows are grouped into chunks. The cursor is read
    /// in the statement, so the plan assumes a third of the app's devices lie past it, never the
    /// one row a histogram would promise for a cursor near the newest device.
    @Test func theExpansionReadsTheAppsDevicesInOrderFromTheCursor() async throws {
        let plan = try await Self.withStaleStatistics { client, queue in
            let app = try await AppDirectory(client: client, logger: Logger(label: "test")).list().first { $0.code == "plan" }!.id
            try await client.query("INSERT INTO push_jobs (app_id, message) VALUES (\(app), '{}')")
            let audience = try #require(try await queue.unexpandedJobs(excludingApps: [], excludingJobs: [], limit: 1).first)
            return try await Self.explain(queue.expandStatement(audience, limit: 128), client)
        }
        // An index in id order (this app's, or the primary key when the app has every device).
        #expect(
            plan.contains("Index Scan using push_devices_active_by_app_id on push_devices d")
                || plan.contains("Index Scan using push_devices_pkey on push_devices d"), "\(plan)")
        let sortKeys = plan.split(separator: "\n").filter { $0.contains("Sort Key") }.map { $0.trimmingCharacters(in: .whitespaces) }
        #expect(sortKeys.allSatisfy { $0 == "Sort Key: picked.part" }, "\(plan)")
        #expect(plan.contains("->  WindowAgg") && plan.contains("Limit"), "\(plan)")
        #expect(!plan.contains("Bitmap") && !plan.contains("Seq Scan on push_devices"), "\(plan)")
    }

    /// The same stale statistics say no delivery has a lease owner. Writing 2,000 results
    /// looks them up by primary key; with the lease as a constant filter it scanned the whole
    /// table and joined the results by a nested loop over every row it found.
    @Test func resultsAreWrittenByPrimaryKeyWhateverTheStatistics() async throws {
        let plan = try await Self.withStaleStatistics { client, queue in
            let claimed = try await queue.claim(limit: 2000, excludingApps: [])
            #expect(claimed.count == 2000)
            return try await Self.explain(
                queue.recordStatement(
                    DeliveryQueue.Result.sent(claimed)[...], finishedChunks: [], allowing: [],
                    heldRowsCreated: try #require(try await queue.runningJobsSpan())), client)
        }
        // The day's partition by its primary key; the days ahead, empty, cost nothing to scan.
        #expect(plan.contains("_pkey on push_deliveries_"), "\(plan)")
        #expect(!QueryPlan.sequentialScansWithPages(in: plan).contains { $0.contains("on push_deliveries") }, "\(plan)")
    }

    /// The log keeps a month of days, a partition each. The claim, the takeover of expired
    /// chunks, the update of held rows and the completion of jobs bind their jobs' creation days
    /// as values, so each is planned for those days alone; bound through a join or a subquery,
    /// every day kept was planned on every call (10–20 ms a statement at 39 partitions in
    /// bench/fanout, a third of the database's time in a campaign). A write of first attempts
    /// alone plans no day at all.
    @Test func theQueuesStatementsPlanOnlyTheirJobsDays() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        try await database.withClient { client in
            try await client.query(
                "SELECT count(push_create_delivery_partition((now() AT TIME ZONE 'UTC')::date - g)) FROM generate_series(1, 10) g")
            let app = try await AppDirectory(client: client, logger: Logger(label: "test")).add(
                code: "days", name: "days", serviceAccount: nil
            ).id
            try await client.query(
                "INSERT INTO push_devices (user_id, app_id, token, platform) SELECT g, \(app), 'days-' || g, 'android' FROM generate_series(1, 10) g"
            )
            let job = try await client.query(
                """
                WITH job AS (INSERT INTO push_jobs (app_id, status, message, audience_complete, started_at)
                             VALUES (\(app), 'running', '{}', true, now()) RETURNING id, created_at, app_id),
                     row AS (INSERT INTO push_deliveries (job_id, device_id, job_created_at, app_id)
                             SELECT job.id, d.id, job.created_at, job.app_id FROM job, push_devices d WHERE d.token = 'days-1'),
                     chunk AS (INSERT INTO push_job_chunks (job_id, device_ids, lease_owner, lease_until)
                               SELECT job.id, ARRAY(SELECT id FROM push_devices WHERE token <> 'days-1'), 'gone', now() - interval '1 second'
                                 FROM job)
                SELECT id FROM job
                """
            ).collect().first!.decode(Int64.self)
            let day = try await client.query("SELECT DISTINCT tableoid::regclass::text FROM push_deliveries").collect().first!.decode(
                String.self)
            let queue = DeliveryQueue(client: client, worker: "days", lease: .seconds(30), logger: Logger(label: "test"))
            let span = try #require(try await queue.runningJobsSpan())
            let plans = [
                "claim": queue.claimStatement(limit: 128, excludingApps: [], jobsCreated: span),
                "takeover": queue.takeOverStatement(room: 128, excludingApps: [], jobsCreated: span),
                "completion": queue.completionStatement([job], jobsCreated: span),
            ]
            let retried = try await queue.claim(limit: 128, excludingApps: [])
            let firstAttempts = try await queue.takeOverChunks(room: 128, excludingApps: []).claimed
            #expect(retried.count == 1 && firstAttempts.count == 9)
            let writes = [
                "results with a held row": queue.recordStatement(
                    DeliveryQueue.Result.sent(retried + firstAttempts)[...], finishedChunks: [], allowing: [],
                    heldRowsCreated: span),
                "first attempts alone": queue.recordStatement(
                    DeliveryQueue.Result.sent(firstAttempts)[...], finishedChunks: [], allowing: [],
                    heldRowsCreated: .empty),
            ]
            for (name, statement) in plans.merging(writes, uniquingKeysWith: { $1 }) {
                let plan = try await Self.explain(statement, client)
                let days = Set(plan.matches(of: /push_deliveries_(\d{8}|default)\b/).map { String($0.output.0) })
                if name == "first attempts alone" {
                    #expect(days.isEmpty, "\(name): \(days.sorted())\n\(plan)")
                } else {
                    // The job's day, and the next or the one before when it was made within a second of midnight.
                    #expect(days.contains(day) && days.count <= 2, "\(name): \(days.sorted())\n\(plan)")
                }
            }
        }
    }

    /// A table whose statistics say "everything was sent" (an earlier campaign, analyzed) and
    /// that then gets 20,000 pending deliveries the planner does not know about.
    private static func withStaleStatistics(_ body: @Sendable (PostgresClient, DeliveryQueue) async throws -> String) async throws -> String
    {
        let database = try await TestPostgres.shared.makeDatabase()
        return try await database.withClient { client in
            let app = try await AppDirectory(client: client, logger: Logger(label: "test")).add(
                code: "plan", name: "plan", serviceAccount: nil
            ).id
            try await client.query(
                """
                INSERT INTO push_devices (user_id, app_id, token, platform)
                SELECT g, \(app), 'plan-token-' || g, 'android' FROM generate_series(1, 20000) g
                """)
            // The earlier campaign: every delivery sent, then analyzed.
            try await client.query(
                """
                WITH job AS (INSERT INTO push_jobs (app_id, status, message, audience_complete, started_at, finished_at)
                             VALUES (\(app), 'completed', '{}', true, now(), now()) RETURNING id, created_at, app_id)
                INSERT INTO push_deliveries (job_id, device_id, status, attempts, job_created_at, app_id)
                SELECT job.id, d.id, 'sent', 1, job.created_at, job.app_id FROM job, push_devices d
                """)
            try await client.query("ANALYZE push_devices")
            try await client.query("ANALYZE push_deliveries")
            // Per partition: the partitioned table has no storage parameters of its own.
            try await client.query(
                """
                DO $$DECLARE p regclass; BEGIN
                    FOR p IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'push_deliveries'::regclass LOOP
                        EXECUTE format('ALTER TABLE %s SET (autovacuum_enabled = off)', p);
                    END LOOP;
                END$$
                """)
            // The new campaign, unknown to the statistics.
            try await client.query(
                """
                WITH job AS (INSERT INTO push_jobs (app_id, status, message, audience_complete, started_at)
                             VALUES (\(app), 'running', '{}', true, now()) RETURNING id, created_at, app_id)
                INSERT INTO push_deliveries (job_id, device_id, job_created_at, app_id)
                SELECT job.id, d.id, job.created_at, job.app_id FROM job, push_devices d
                """)
            return try await body(
                client, DeliveryQueue(client: client, worker: "plan-test", lease: .seconds(30), logger: Logger(label: "test")))
        }
    }

    private static func explain(_ statement: PostgresQuery, _ client: PostgresClient) async throws -> String {
        var lines: [String] = []
        for try await line in try await client.query(PostgresQuery(unsafeSQL: "EXPLAIN " + statement.sql, binds: statement.binds)).decode(
            String.self)
        {
            lines.append(line)
        }
        return lines.joined(separator: "\n")
    }
}
