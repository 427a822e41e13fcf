import DeviceRegistry
import Foundation
import PostgresNIO
import TestSupport
import Testing

/// `pushctl retention` as an operator or cron runs it, against a log with a day of finished jobs
/// 40 days back and a day with a job still running 39 days back.
@Suite("pushctl retention")
struct RetentionCommandTests {
    let pushctl = BuiltProduct("pushctl")

    func setUp() async throws -> (TestDatabase, [String: String]) {
        let database = try await TestPostgres.shared.makeDatabase()
        try await database.withClient { client in
            try await client.query("INSERT INTO apps (code, name) VALUES ('wowa', 'Wowa')")
            try await client.query(
                "INSERT INTO push_devices (user_id, app_id, token, platform) SELECT g, (SELECT id FROM apps), 'tok-' || g, 'android' FROM generate_series(1, 4) g"
            )
            for (daysAgo, status) in [(40, "completed"), (40, "failed"), (39, "running")] {
                try await client.query(
                    "SELECT push_create_delivery_partition(((now() - make_interval(days => \(daysAgo)::int)) AT TIME ZONE 'UTC')::date)")
                try await client.query(
                    """
                    WITH job AS (
                        INSERT INTO push_jobs (app_id, message, status, created_at, finished_at)
                        VALUES ((SELECT id FROM apps), '{}', \(status), now() - make_interval(days => \(daysAgo)::int),
                                CASE WHEN \(status) <> 'running' THEN now() END)
                        RETURNING id, created_at, app_id)
                    INSERT INTO push_deliveries (job_id, device_id, status, job_created_at, app_id)
                    SELECT job.id, d.id, 'sent', job.created_at, job.app_id FROM job CROSS JOIN push_devices d
                    """)
            }
            try await client.query("ANALYZE push_deliveries")
        }
        return (database, ["DATABASE_URL": database.url])
    }

    /// The jobs and the rows of the log, by day.
    func state(_ database: TestDatabase) async throws -> String {
        try await database.text(
            """
            SELECT concat_ws(' | ', (SELECT string_agg(status, ',' ORDER BY id) FROM push_jobs),
                   (SELECT string_agg(tableoid::regclass::text || ':' || n, ',' ORDER BY tableoid::regclass::text)
                      FROM (SELECT tableoid, count(*) AS n FROM push_deliveries GROUP BY 1) r))
            """)
    }

    func day(_ database: TestDatabase, daysAgo: Int) async throws -> String {
        try await database.text("SELECT to_char((now() AT TIME ZONE 'UTC')::date - \(daysAgo)::int, 'YYYY-MM-DD')")
    }

    /// The listing's rows: day, deliveries, jobs, outcome (columns are two spaces apart or more).
    static func rows(_ stdout: String) -> [[String]] {
        stdout.split(separator: "\n").dropFirst().map { line in
            line.components(separatedBy: "  ").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        }
    }

    @Test func aDryRunListsTheOldDaysAndChangesNothing() async throws {
        let (database, env) = try await setUp()
        let before = try await state(database)
        let result = try await pushctl.run(["retention", "--dry-run"], environment: env)
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.hasPrefix("DAY"), "\(result.stdout)")
        #expect(
            Self.rows(result.stdout) == [
                [try await day(database, daysAgo: 40), "8", "2", "would drop"],
                [try await day(database, daysAgo: 39), "4", "1", "kept: 1 of its jobs queued or running"],
            ], "\(result.stdout)")
        #expect(try await state(database) == before)
    }

    @Test func aRunDropsTheOldDaysWhoseJobsEndedWithTheirJobs() async throws {
        let (database, env) = try await setUp()
        let result = try await pushctl.run(["retention", "--days", "30"], environment: env)
        #expect(result.status == 0 && result.stderr.isEmpty, "\(result.stderr)")
        #expect(
            Self.rows(result.stdout) == [
                [try await day(database, daysAgo: 40), "8", "2", "dropped"],
                [try await day(database, daysAgo: 39), "4", "1", "kept: 1 of its jobs queued or running"],
            ], "\(result.stdout)")
        let left = try await state(database)
        #expect(left.hasPrefix("running | "), "only the running job is left: \(left)")
        #expect(
            !left.contains(
                try await database.text("SELECT 'push_deliveries_' || to_char((now() AT TIME ZONE 'UTC')::date - 40, 'YYYYMMDD')")))

        // DELIVERY_RETENTION_DAYS is the default; the option wins over it.
        let longer = try await pushctl.run(["retention"], environment: env.merging(["DELIVERY_RETENTION_DAYS": "60"]) { $1 })
        #expect(longer.status == 0 && longer.stdout == "no day of the delivery log is older than 60 days\n", "\(longer.stdout)")
        let off = try await pushctl.run(["retention"], environment: env.merging(["DELIVERY_RETENTION_DAYS": "off"]) { $1 })
        #expect(off.status == 0 && off.stdout.hasPrefix("DELIVERY_RETENTION_DAYS is off: nothing dropped"), "\(off.stdout)")
        let option = try await pushctl.run(
            ["retention", "--days", "30"], environment: env.merging(["DELIVERY_RETENTION_DAYS": "off"]) { $1 })
        #expect(Self.rows(option.stdout).map { $0.last } == ["kept: 1 of its jobs queued or running"], "\(option.stdout)")
        #expect(try await state(database) == left)
    }

    @Test func badDaysAreOneClearLineAndChangeNothing() async throws {
        let (database, env) = try await setUp()
        let before = try await state(database)
        let cases: [([String], [String: String], String)] = [
            (["--days", "0"], env, "pushctl: --days must be a whole number of days in 1...3650, not 0"),
            (["--days=-7"], env, "pushctl: --days must be a whole number of days in 1...3650, not -7"),
            (["--days", "4000"], env, "pushctl: --days must be a whole number of days in 1...3650, not 4000"),
            (["--days", "thirty"], env, "The value 'thirty' is invalid for '--days <days>'"),
            (["--days", "1.5"], env, "The value '1.5' is invalid for '--days <days>'"),
            (
                [], env.merging(["DELIVERY_RETENTION_DAYS": "0"]) { $1 },
                "pushctl: DELIVERY_RETENTION_DAYS: '0' is neither a whole number of days in 1...3650 nor off"
            ),
        ]
        for (arguments, environment, message) in cases {
            let result = try await pushctl.run(["retention"] + arguments, environment: environment)
            #expect(result.status != 0, "\(arguments)")
            #expect(result.stderr.contains(message), "\(arguments): \(result.stderr)")
            #expect(result.stdout.isEmpty, "\(arguments): \(result.stdout)")
        }
        #expect(try await state(database) == before)
    }
}
