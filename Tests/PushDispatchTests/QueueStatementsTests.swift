import DeviceRegistry
import Foundation
import Logging
import PostgresNIO
import TestSupport
import Testing

@testable import PushDispatch

/// The queue's prepared statements run on PostgreSQL's generic plan after their first five
/// runs on a connection: that plan must read by the index the values would, whatever they are.
/// The database here gives every statement its generic plan from the first run on
/// (`plan_cache_mode = force_generic_plan`), over tables the size of a service that has sent
/// before: 20,000 devices, 20,000 finished jobs.
@Suite("The queue's prepared statements")
struct QueueStatementsTests {
    /// Each statement's generic plan reads its table by the index meant for it, never a
    /// sequential scan of push_jobs or push_devices.
    @Test func genericPlansReadByIndex() async throws {
        let plans = try await Self.withGenericPlans { client, app in
            let cases: [(name: String, sql: String, arguments: String)] = [
                ("users", AudienceExpansionStatement.sql, "(1, \(app), NULL, 256, 'w', 30, '{5,6}')"),
                ("unexpanded", UnexpandedJobsStatement.sql, "(NULL, '{}', '{}', 64)"),
                ("running", RunningJobsStatement.sql, "('{1,2}')"),
                ("running span", RunningJobsSpanStatement.sql, ""),
                ("jobs span", JobsSpanStatement.sql, "('{1,2}')"),
                ("completable span", CompletableJobsSpanStatement.sql, "('{1,2}')"),
                ("details", JobDetailsStatement.sql, "('{1,2}')"),
            ]
            return try await client.withConnection { connection in
                var plans: [String: String] = [:]
                for (index, statement) in cases.enumerated() {
                    try await connection.query(PostgresQuery(unsafeSQL: "PREPARE s\(index) AS \(statement.sql)"), logger: Self.logger)
                    let rows = try await connection.query(
                        PostgresQuery(unsafeSQL: "EXPLAIN EXECUTE s\(index)\(statement.arguments)"), logger: Self.logger)
                    var lines: [String] = []
                    for try await line in rows.decode(String.self) { lines.append(line) }
                    plans[statement.name] = lines.joined(separator: "\n")
                }
                return plans
            }
        }
        for (name, plan) in plans {
            #expect(!plan.contains("Seq Scan on push_jobs") && !plan.contains("Seq Scan on push_devices"), "\(name): \(plan)")
        }
        // One user's devices by the user index, not the app's devices in id order.
        let users = try #require(plans["users"])
        #expect(users.contains("push_devices_by_user") || users.contains("push_devices_active_by_user"), "\(users)")
        #expect(!users.contains("push_devices_active_by_app_id") && !users.contains("push_devices_pkey"), "\(users)")
        #expect(try #require(plans["unexpanded"]).contains("push_jobs_expandable"))
        #expect(try #require(plans["running"]).contains("push_jobs_running"))
        #expect(try #require(plans["running span"]).contains("push_jobs_running"))
        #expect(try #require(plans["completable span"]).contains("push_jobs_running"))
        #expect(try #require(plans["jobs span"]).contains("push_jobs_pkey"))
        #expect(try #require(plans["details"]).contains("push_jobs_pkey"))
    }

    /// Twelve singles, each expanded on the generic plan of the prepared expansion: each takes its
    /// user's active devices of its platforms and nothing else. A job to 150 users and a whole
    /// app's job (both unnamed) still take theirs.
    @Test func audiencesOfUsersTakeTheirUsersDevicesOnTheGenericPlan() async throws {
        let taken = try await Self.withGenericPlans { client, app in
            // Users 1..12 have a second device (iOS) and an inactive one besides the seeded one.
            try await client.query(
                """
                INSERT INTO push_devices (user_id, app_id, token, platform, is_active, deactivated_at, deactivation_reason)
                SELECT g, \(app), 'stmt-ios-' || g, 'ios', true, NULL, NULL FROM generate_series(1, 12) g
                UNION ALL
                SELECT g, \(app), 'stmt-gone-' || g, 'android', false, now(), 'logout' FROM generate_series(1, 12) g
                """)
            let queue = DeliveryQueue(client: client, worker: "stmt", lease: .seconds(30), logger: Self.logger)
            var taken: [[String]] = []
            for user in 1...12 {
                if user < 12 {
                    try await client.query(
                        "SELECT push_enqueue(app_code => 'stmt', user_ids => ARRAY[\(Int64(user))]::bigint[], message => '{}'::jsonb)")
                } else {
                    // push_enqueue has no platforms; the HTTP API's send to users does.
                    try await client.query(
                        """
                        INSERT INTO push_jobs (app_id, user_ids, platforms, message, priority)
                        VALUES (\(app), ARRAY[\(Int64(user))]::bigint[], ARRAY['ios'], '{}', 'high')
                        """)
                }
                let expanded = try await queue.expandOldestJob(limit: 256)
                #expect(expanded.complete)
                taken.append(expanded.claimed.map(\.token).sorted())
            }
            // More users than are prepared for: the same text, planned for its values.
            try await client.query(
                "SELECT push_enqueue(app_code => 'stmt', user_ids => ARRAY(SELECT generate_series(1, 150)::bigint), message => '{}'::jsonb)"
            )
            let many = try await queue.expandOldestJob(limit: 1000)
            #expect(many.complete)
            taken.append([String(many.claimed.count), String(Set(many.claimed.map(\.token)).count)])
            try await client.query("SELECT push_enqueue_campaign(app_code => 'stmt', message => '{}'::jsonb)")
            let campaign = try await queue.expandOldestJob(limit: 30_000)
            #expect(campaign.complete)
            taken.append([String(campaign.claimed.count)])
            return taken
        }
        for user in 1...11 {
            #expect(taken[user - 1] == ["stmt-\(user)", "stmt-ios-\(user)"].sorted(), "user \(user)")
        }
        #expect(taken[11] == ["stmt-ios-12"])
        // Users 1–150's Android devices and users 1–12's iOS ones, each once.
        #expect(taken[12] == ["162", "162"])
        #expect(taken[13] == ["20012"])
    }

    private static let logger = Logger(label: "test")

    /// A database whose every connection plans prepared statements generically, with app `stmt`:
    /// devices `stmt-1`…`stmt-20000` (Android, user n each), 20,000 completed jobs, analyzed.
    private static func withGenericPlans<T: Sendable>(_ body: @Sendable (PostgresClient, Int64) async throws -> T) async throws -> T {
        let database = try await TestPostgres.shared.makeDatabase()
        let app = try await database.withClient { client in
            try await client.query(PostgresQuery(unsafeSQL: "ALTER DATABASE \"\(database.name)\" SET plan_cache_mode = force_generic_plan"))
            let app = try await AppDirectory(client: client, logger: logger).add(code: "stmt", name: "stmt", serviceAccount: nil).id
            try await client.query(
                """
                INSERT INTO push_devices (user_id, app_id, token, platform)
                SELECT g, \(app), 'stmt-' || g, 'android' FROM generate_series(1, 20000) g
                """)
            try await client.query(
                """
                INSERT INTO push_jobs (app_id, status, message, audience_complete, started_at, finished_at)
                SELECT \(app), 'completed', '{}', true, now(), now() FROM generate_series(1, 20000)
                """)
            try await client.query("ANALYZE push_devices")
            try await client.query("ANALYZE push_jobs")
            return app
        }
        // A new client: its connections start with the database's setting.
        return try await database.withClient { client in try await body(client, app) }
    }
}
