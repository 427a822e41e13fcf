import DeviceRegistry
import Foundation
import Logging
import PostgresNIO
import TestSupport
import Testing

/// pushctl send/campaign/jobs/job/cancel/prune, as operators and cron run them.
@Suite("pushctl sending and jobs")
struct SendCommandTests {
    let pushctl = BuiltProduct("pushctl")

    func setUp() async throws -> (TestDatabase, [String: String]) {
        let database = try await TestPostgres.shared.makeDatabase()
        try await database.withClient { client in
            let app = try await AppDirectory(client: client, logger: Logger(label: "t")).add(
                code: "wowa", name: "Wowa", serviceAccount: nil
            ).id
            for user in 1...3 {
                _ = try await DeviceDirectory(client: client).register(
                    DeviceRegistration(token: "tok-\(user)", platform: user == 3 ? "ios" : "android", deviceID: nil, tokenType: nil),
                    userID: Int64(user), appID: app, logger: Logger(label: "t"))
            }
        }
        return (database, ["DATABASE_URL": database.url])
    }

    func scalar(_ database: TestDatabase, _ query: PostgresQuery) async throws -> String {
        try await database.withClient { client in
            for try await value in try await client.query(query).decode(String.self) { return value }
            return ""
        }
    }

    @Test func cronCampaignWithAnIdempotencyKeySendsOnce() async throws {
        let (database, env) = try await setUp()
        let arguments = [
            "campaign", "--app", "wowa", "--title", "Daily digest", "--data", "kind=digest",
            "--idempotency-key", "daily-digest-2026-11-21", "--platform", "android",
        ]
        let first = try await pushctl.run(arguments, environment: env)
        let second = try await pushctl.run(arguments, environment: env)
        #expect(first.status == 0 && second.status == 0, "\(first.stderr)\(second.stderr)")
        let id = first.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(Int64(id) != nil && second.stdout == first.stdout)
        #expect(!first.stderr.contains("idempotency key"))
        #expect(
            second.stderr
                == "pushctl: idempotency key \"daily-digest-2026-11-21\" had queued job \(id) before; nothing new was queued\n")
        #expect(try await scalar(database, "SELECT count(*)::text FROM push_jobs") == "1")
        #expect(
            try await scalar(database, "SELECT message::text FROM push_jobs")
                == #"{"data": {"kind": "digest"}, "notification": {"title": "Daily digest"}}"#)
        #expect(try await scalar(database, "SELECT array_to_string(platforms, ',') FROM push_jobs") == "android")
    }

    @Test func sendToUsersScheduledAndDryRun() async throws {
        let (database, env) = try await setUp()
        let sent = try await pushctl.run(
            [
                "send", "--app", "wowa", "--user", "1", "--user", "2", "--message", #"{"notification":{"title":"Hi"}}"#,
                "--at", "2030-01-01T09:00:00Z", "--dry-run",
            ], environment: env)
        #expect(sent.status == 0, "\(sent.stderr)")
        let id = sent.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(
            try await scalar(
                database,
                "SELECT array_to_string(user_ids, ',') || ' ' || validate_only::text || ' ' || to_char(send_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI') FROM push_jobs WHERE id = \(Int64(id)!)"
            )
                == "1,2 true 2030-01-01 09:00")
        let listing = try await pushctl.run(["jobs"], environment: env)
        #expect(listing.status == 0 && listing.stdout.contains("queued") && listing.stdout.contains("wowa"))
        let detail = try await pushctl.run(["job", id], environment: env)
        #expect(detail.stdout.contains("job \(id) (app wowa): queued"))
        // Not expanded yet: its audience is the users' active devices, all pending.
        #expect(detail.stdout.contains("audience 2: sent 0, failed 0, skipped 0, pending 2"), "\(detail.stdout)")
    }

    @Test func cancelStopsAJobAndSkipsItsPendingDeliveries() async throws {
        let (database, env) = try await setUp()
        let id = try await pushctl.run(["campaign", "--app", "wowa", "--body", "x"], environment: env).stdout.trimmingCharacters(
            in: .whitespacesAndNewlines)
        // What a worker's audience expansion would have written.
        try await database.withClient { client in
            _ = try await client.query("UPDATE push_jobs SET status = 'running' WHERE id = \(Int64(id)!)")
            _ = try await client.query(
                "INSERT INTO push_deliveries (job_id, device_id, job_created_at, app_id) SELECT j.id, d.id, j.created_at, j.app_id FROM push_jobs j, push_devices d WHERE j.id = \(Int64(id)!)"
            )
            _ = try await client.query("UPDATE push_deliveries SET status = 'sent' WHERE device_id = (SELECT min(id) FROM push_devices)")
        }
        let cancelled = try await pushctl.run(["cancel", id], environment: env)
        #expect(cancelled.status == 0 && cancelled.stdout.contains("job \(id) cancelled"), "\(cancelled.stderr)")
        #expect(
            try await scalar(
                database, "SELECT string_agg(status || ':' || COALESCE(error_code, '-'), ',' ORDER BY device_id) FROM push_deliveries")
                == "sent:-,skipped:CANCELLED,skipped:CANCELLED")
        let again = try await pushctl.run(["cancel", id], environment: env)
        #expect(again.status != 0 && again.stderr.contains("job \(id) is already cancelled"))
        let detail = try await pushctl.run(["job", id], environment: env)
        #expect(detail.stdout.contains("cancelled") && detail.stdout.contains("audience 3: sent 1, failed 0, skipped 2, pending 0"))
    }

    @Test func pruneDeactivatesIdleDevicesOnlyWhenNotADryRun() async throws {
        let (database, env) = try await setUp()
        try await database.withClient { client in
            _ = try await client.query(
                "UPDATE push_devices SET last_used_at = now() - interval '300 days' WHERE token IN ('tok-1', 'tok-2')")
        }
        let dry = try await pushctl.run(["prune", "--dry-run"], environment: env)
        #expect(dry.stdout.contains("would deactivate 2 devices idle for over 270 days"), "\(dry.stdout)\(dry.stderr)")
        #expect(try await scalar(database, "SELECT count(*)::text FROM push_devices WHERE is_active") == "3")
        let real = try await pushctl.run(["prune", "--idle-days", "270"], environment: env)
        #expect(real.stdout.contains("wowa: 2") && real.stdout.contains("deactivated 2 devices"))
        #expect(
            try await scalar(
                database, "SELECT string_agg(token || ':' || COALESCE(deactivation_reason, 'active'), ',' ORDER BY token) FROM push_devices"
            )
                == "tok-1:stale,tok-2:stale,tok-3:active")
    }

    @Test func badInputIsOneLineAndQueuesNothing() async throws {
        let (database, env) = try await setUp()
        let cases: [([String], [String: String], String)] = [
            (["campaign", "--app", "nope", "--title", "x"], env, #"unknown app code "nope""#),
            (["campaign", "--app", "wowa", "--message", #"{"token":"x"}"#], env, "message must not carry a target (token)"),
            (["campaign", "--app", "wowa", "--message", #"{"data":{"n":1}}"#], env, "message.data.n must be a string"),
            (["campaign", "--app", "wowa"], env, "say what to send"),
            (["campaign", "--app", "wowa", "--title", "x", "--at", "tomorrow"], env, "--at 'tomorrow' is not an ISO 8601 time"),
            (["campaign", "--app", "wowa", "--title", "x", "--data", "novalue"], env, "--data must be KEY=VALUE"),
            (["campaign", "--app", "wowa", "--title", "x", "--data", "k=1", "--data", "k=2"], env, "--data k is given twice"),
            (
                ["campaign", "--app", "wowa", "--message", #"{"data":{"k":"v"}}"#, "--title", "x"], env,
                "give --message, or --title/--body/--data, not both"
            ),
            (["send", "--app", "wowa", "--title", "x"], env, "name at least one --user"),
            (["job", "999"], env, "no job 999"),
            (["cancel", "999"], env, "no job 999"),
            (
                ["campaign", "--app", "wowa", "--title", "x"], ["DATABASE_URL": "postgres://u@127.0.0.1:1/x?sslmode=disable"],
                "cannot reach the database"
            ),
        ]
        for (arguments, environment, message) in cases {
            let result = try await pushctl.run(arguments, environment: environment)
            #expect(result.status != 0, "\(arguments)")
            #expect(result.stderr.contains(message), "\(arguments): \(result.stderr)")
            #expect(result.stderr.split(separator: "\n").count == 1, "\(arguments): \(result.stderr)")
        }
        #expect(try await scalar(database, "SELECT count(*)::text FROM push_jobs") == "0")
    }

    /// JSON an option carries is checked before the database is touched (an unreachable one
    /// gives the same answer): the option named, what is wrong and where, not PostgreSQL's words.
    @Test func badJSONInMessageIsNamedWithWhatAndWhereAndQueuesNothing() async throws {
        let (database, env) = try await setUp()
        let unreachable = ["DATABASE_URL": "postgres://u@127.0.0.1:1/x?sslmode=disable"]
        let cases: [([String], [String: String], String)] = [
            (
                ["send", "--app", "wowa", "--user", "1", "--message", #"{"notification":{"title":"Hi"}"#], env,
                "--message is not valid JSON: it ends too early, at line 1, column 31"
            ),
            (
                ["campaign", "--app", "wowa", "--message", #"{"data":{"k":"v",}}"#], env,
                "--message is not valid JSON: unexpected '}' at line 1, column 18"
            ),
            (
                ["campaign", "--app", "wowa", "--message", "{'notification':{}}"], unreachable,
                "--message is not valid JSON: unexpected ''' at line 1, column 2"
            ),
        ]
        for (arguments, environment, message) in cases {
            let result = try await pushctl.run(arguments, environment: environment)
            #expect(result.status == 1, "\(arguments)")
            #expect(result.stderr == "pushctl: \(message)\n", "\(arguments)")
            #expect(result.stdout.isEmpty, "\(arguments)")
        }
        #expect(try await scalar(database, "SELECT count(*)::text FROM push_jobs") == "0")
    }

    // MARK: priority and expiry (issue 24)

    func run(_ arguments: [String], _ env: [String: String]) async throws -> Int64 {
        let result = try await pushctl.run(arguments, environment: env)
        #expect(result.status == 0, "\(arguments): \(result.stderr)")
        return try #require(Int64(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)), "\(arguments): \(result.stdout)")
    }

    @Test func sendDefaultsToHighCampaignToBulkAndEitherTakesAnyPriority() async throws {
        let (database, env) = try await setUp()
        var expected: [Int64: String] = [:]
        expected[try await run(["send", "--app", "wowa", "--user", "1", "--title", "x"], env)] = "high"
        expected[try await run(["campaign", "--app", "wowa", "--title", "x"], env)] = "bulk"
        for priority in ["high", "normal", "bulk"] {
            expected[try await run(["send", "--app", "wowa", "--user", "1", "--title", "x", "--priority", priority], env)] = priority
            expected[try await run(["campaign", "--app", "wowa", "--title", "x", "--priority", priority], env)] = priority
        }
        for (id, priority) in expected {
            #expect(try await scalar(database, "SELECT priority FROM push_jobs WHERE id = \(id)") == priority, "job \(id)")
        }
        #expect(try await scalar(database, "SELECT count(*)::text FROM push_jobs") == "8")
        let listing = try await pushctl.run(["jobs"], environment: env)
        let header = try #require(listing.stdout.split(separator: "\n").first)
        #expect(
            header.split(separator: " ", omittingEmptySubsequences: true).prefix(7) == [
                "ID", "APP", "KIND", "STATUS", "DRY", "RUN", "PRIORITY",
            ], "\(listing.stdout)")
    }

    @Test(arguments: [("3600", 3600), ("90s", 90), ("15m", 900), ("2h", 7200), ("1d", 86_400)])
    func ttlIsSecondsOrAUnitAndCountsFromTheSendTime(_ ttl: String, _ seconds: Int) async throws {
        let (database, env) = try await setUp()
        let id = try await run(["campaign", "--app", "wowa", "--title", "x", "--at", "2030-01-01T09:00:00Z", "--ttl", ttl], env)
        #expect(
            try await scalar(database, "SELECT extract(epoch FROM expires_at - send_at)::int::text FROM push_jobs WHERE id = \(id)")
                == String(seconds))
    }

    @Test func expiresAtIsStoredAndJobsShowPriorityExpiryAndExpiredCounts() async throws {
        let (database, env) = try await setUp()
        let lasting = try await run(
            ["campaign", "--app", "wowa", "--title", "x", "--priority", "normal", "--expires-at", "2030-01-01T10:00:00+01:00"], env)
        #expect(
            try await scalar(
                database, "SELECT to_char(expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI') FROM push_jobs WHERE id = \(lasting)")
                == "2030-01-01 09:00")
        let expiring = try await run(["send", "--app", "wowa", "--user", "1", "--user", "2", "--title", "x", "--ttl", "1"], env)
        let plain = try await run(["send", "--app", "wowa", "--user", "3", "--title", "x"], env)
        try await Task.sleep(for: .milliseconds(1100))
        // What every worker runs each second.
        try await database.withClient { client in _ = try await client.query("SELECT push_expire_jobs()") }

        let detail = try await pushctl.run(["job", String(expiring)], environment: env)
        #expect(detail.stdout.contains("job \(expiring) (app wowa): completed, priority high"), "\(detail.stdout)")
        #expect(detail.stdout.contains(", expires at 20") && detail.stdout.contains(", finished 20"), "\(detail.stdout)")
        #expect(detail.stdout.contains("audience 2: sent 0, failed 0, skipped 2 (2 expired), pending 0"), "\(detail.stdout)")
        let other = try await pushctl.run(["job", String(lasting)], environment: env)
        #expect(
            other.stdout.contains("queued, priority normal") && other.stdout.contains("expires at 2030-01-01T09:00:00.000Z")
                && other.stdout.contains("skipped 0 (0 expired), pending 3"), "\(other.stdout)")
        let never = try await pushctl.run(["job", String(plain)], environment: env)
        #expect(
            !never.stdout.contains("expire") && never.stdout.contains("audience 1: sent 0, failed 0, skipped 0, pending 1"),
            "\(never.stdout)")

        let listing = try await pushctl.run(["jobs"], environment: env)
        let rows = JobListingTests.table(listing.stdout)
        try #require(rows.count == 3, "\(listing.stdout)")
        #expect(
            rows[0]["ID"] == String(plain) && rows[0]["PRIORITY"] == "high" && rows[0]["EXPIRES AT"] == "-" && rows[0]["EXPIRED"] == "0")
        #expect(rows[1]["ID"] == String(expiring) && rows[1]["STATUS"] == "completed", "\(rows[1])")
        #expect(
            ["AUDIENCE", "SENT", "FAILED", "SKIPPED", "EXPIRED", "PENDING"].map { rows[1][$0] } == ["2", "0", "0", "2", "2", "0"],
            "\(rows[1])")
        #expect(rows[2]["ID"] == String(lasting) && rows[2]["PRIORITY"] == "normal" && rows[2]["EXPIRES AT"] == "2030-01-01T09:00:00.000Z")
    }

    @Test func badPriorityOrExpiryIsRefusedClearlyAndQueuesNothing() async throws {
        let (database, env) = try await setUp()
        let cases: [([String], String)] = [
            (
                ["send", "--app", "wowa", "--user", "1", "--title", "x", "--priority", "urgent"],
                "The value 'urgent' is invalid for '--priority <priority>'. Please provide one of 'high', 'normal' or 'bulk'."
            ),
            (["campaign", "--app", "wowa", "--title", "x", "--priority", "HIGH"], "Please provide one of 'high', 'normal' or 'bulk'"),
            (
                ["campaign", "--app", "wowa", "--title", "x", "--expires-at", "2020-01-01T00:00:00Z"],
                "pushctl: --expires-at: expires_at 2020-01-01"
            ),
            (
                ["campaign", "--app", "wowa", "--title", "x", "--at", "2030-01-01T10:00:00Z", "--expires-at", "2030-01-01T09:00:00Z"],
                "is not after send_at"
            ),
            (
                ["campaign", "--app", "wowa", "--title", "x", "--at", "2020-01-01T10:00:00Z", "--ttl", "60"],
                "pushctl: --ttl: expires_at 2020-01-01"
            ),
            (["campaign", "--app", "wowa", "--title", "x", "--expires-at", "tomorrow"], "--expires-at 'tomorrow' is not an ISO 8601 time"),
            (
                ["send", "--app", "wowa", "--user", "1", "--title", "x", "--expires-at", "2030-01-01T00:00:00Z", "--ttl", "60"],
                "give --expires-at or --ttl, not both"
            ),
            (
                ["campaign", "--app", "wowa", "--title", "x", "--ttl", "0"],
                "expected a positive whole number of seconds, or of s, m, h or d"
            ),
            (["campaign", "--app", "wowa", "--title", "x", "--ttl", "-5"], "expected a positive whole number of seconds"),
            (["campaign", "--app", "wowa", "--title", "x", "--ttl", "5x"], "expected a positive whole number of seconds"),
            (["campaign", "--app", "wowa", "--title", "x", "--ttl", "1.5h"], "expected a positive whole number of seconds"),
            (["campaign", "--app", "wowa", "--title", "x", "--ttl", "h"], "expected a positive whole number of seconds"),
            (["campaign", "--app", "wowa", "--title", "x", "--ttl", "9999999999999"], "at most 3650d (ten years)"),
            (["campaign", "--app", "wowa", "--title", "x", "--ttl", "3651d"], "at most 3650d (ten years)"),
            (
                ["campaign", "--app", "wowa", "--title", "x", "--at", "2030-02-30T00:00:00Z"],
                "--at '2030-02-30T00:00:00Z' is not an ISO 8601 time"
            ),
            (
                ["campaign", "--app", "wowa", "--title", "x", "--at", "0000-01-01T00:00:00Z"],
                "--at '0000-01-01T00:00:00Z' is not an ISO 8601 time"
            ),
            (
                ["campaign", "--app", "wowa", "--message", #"{"data":{"k":"a\u0000b"}}"#],
                "pushctl: --message: message.data.k must not contain NUL characters (\\u0000)"
            ),
            (["prune", "--idle-days", "100000"], "--idle-days must be 1 to 36500"),
            (["send", "--app", "wowa", "--user", "0", "--title", "x"], "--user must be a positive user id, not 0"),
        ]
        for (arguments, message) in cases {
            let result = try await pushctl.run(arguments, environment: env)
            #expect(result.status != 0, "\(arguments)")
            #expect(result.stderr.contains(message), "\(arguments): \(result.stderr)")
        }
        #expect(try await scalar(database, "SELECT count(*)::text FROM push_jobs") == "0")
    }

    @Test(arguments: ["send", "campaign", "jobs", "job", "cancel", "prune"])
    func everyNewCommandHasHelp(_ command: String) async throws {
        let result = try await pushctl.run([command, "--help"])
        #expect(result.status == 0 && result.stdout.contains("USAGE:"))
    }
}
