import DeviceRegistry
import Foundation
import TestSupport
import Testing

/// pushctl as operators and cron run it: a subprocess against a real database.
@Suite("pushctl")
struct PushCTLTests {
    let pushctl = BuiltProduct("pushctl")

    @Test func migrateAppliesOnceAndIsIdempotent() async throws {
        let database = try await TestPostgres.shared.makeEmptyDatabase()
        let first = try await pushctl.run(["migrate"], environment: ["DATABASE_URL": database.url])
        #expect(first.status == 0, "\(first.stderr)")
        #expect(first.stdout.contains("applied: 001_apps, 002_push_devices"))
        // LOG_LEVEL defaults to info, as for the other programs; stdout already says what was applied.
        #expect(first.stderr.isEmpty, "\(first.stderr)")
        let second = try await pushctl.run(["migrate", "--database-url", database.url])
        #expect(second.status == 0)
        #expect(second.stdout.hasPrefix("up to date"))
    }

    /// A role that may not create in the schema (any role, from PostgreSQL 15 on, unless granted)
    /// is told what it lacks, and nothing is applied.
    @Test func migrateAsARoleWithoutCreateSaysWhatItNeeds() async throws {
        let database = try await TestPostgres.shared.makeEmptyDatabase()
        let role = "migrator_\(UInt32.random(in: 0...UInt32.max))"
        try await database.withClient { client in
            try await client.query("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
            try await client.query("CREATE ROLE \(unescaped: role) LOGIN PASSWORD 'migrator-password'")
        }
        var url = try #require(URLComponents(string: database.url))
        url.user = role
        url.password = "migrator-password"
        let refused = try await pushctl.run(["migrate"], environment: ["DATABASE_URL": try #require(url.string)])
        try await database.withClient { client in
            try await client.query("DROP OWNED BY \(unescaped: role)")
            try await client.query("DROP ROLE \(unescaped: role)")
        }
        #expect(refused.status == 1)
        #expect(
            refused.stderr.contains("permission denied for schema public") && refused.stderr.contains("GRANT CREATE ON SCHEMA public TO"),
            "\(refused.stderr)")
        #expect(try await database.text("SELECT count(*)::text FROM pg_tables WHERE schemaname = 'public'") == "0")
    }

    /// Then the delivery log's week ahead, as push-worker keeps it: a day missing is created once.
    @Test func migrateCreatesTheDeliveryLogsPartitionsAhead() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let name = try await database.text("SELECT 'push_deliveries_' || to_char((now() AT TIME ZONE 'UTC')::date + 7, 'YYYYMMDD')")
        try await database.withClient { client in try await client.query("DROP TABLE \(unescaped: name)") }
        let first = try await pushctl.run(["migrate"], environment: ["DATABASE_URL": database.url])
        #expect(first.status == 0 && first.stderr.isEmpty, "\(first.stderr)")
        #expect(
            first.stdout.hasPrefix("up to date") && first.stdout.hasSuffix("\ndelivery log partitions created: \(name)\n"),
            "\(first.stdout)")
        #expect(try await database.text("SELECT to_regclass(\(name))::text") == name)
        let second = try await pushctl.run(["migrate"], environment: ["DATABASE_URL": database.url])
        #expect(second.status == 0 && !second.stdout.contains("partitions"), "\(second.stdout)")
    }

    @Test func concurrentMigrateFromSeveralHosts() async throws {
        let database = try await TestPostgres.shared.makeEmptyDatabase()
        let results = try await withThrowingTaskGroup(of: BuiltProduct.Result.self) { group in
            for _ in 0..<4 { group.addTask { try await pushctl.run(["migrate"], environment: ["DATABASE_URL": database.url]) } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        #expect(results.allSatisfy { $0.status == 0 })
        // The runs may share the files (the lock is taken file by file, in each file's
        // transaction); each file is applied once.
        let applied = results.flatMap { result in
            result.stdout.hasPrefix("applied: ")
                ? result.stdout.dropFirst("applied: ".count).trimmingCharacters(in: .whitespacesAndNewlines).components(separatedBy: ", ")
                : []
        }
        #expect(applied.sorted() == (try MigrationRunner.bundled().migrations.map(\.version)))
    }

    @Test func appAddSetCredentialsAndListNeverShowTheKey() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let env = ["DATABASE_URL": database.url]
        let account = try ServiceAccountFile.make(projectID: "wowa-prod")

        let added = try await pushctl.run(
            ["app", "add", "--code", "wowa", "--name", "Wowa", "--service-account", account.path], environment: env)
        #expect(added.status == 0, "\(added.stderr)")
        #expect(added.stdout.contains("app wowa added"))
        #expect(added.stdout.contains(account.clientEmail))

        let plain = try await pushctl.run(["app", "add", "--code", "beta", "--name", "Beta"], environment: env)
        #expect(plain.status == 0 && plain.stdout.contains("no credentials yet"))

        let rotated = try ServiceAccountFile.make(projectID: "beta-prod")
        let set = try await pushctl.run(["app", "set-credentials", "--code", "beta", "--service-account", rotated.path], environment: env)
        #expect(set.status == 0, "\(set.stderr)")

        // From standard input, where no file can be written (kubectl exec -i … < key.json).
        let piped = try ServiceAccountFile.make(projectID: "gamma-prod")
        let fromInput = try await pushctl.run(
            ["app", "add", "--code", "gamma", "--name", "Gamma", "--service-account", "-"], environment: env, inputFile: piped.path)
        #expect(fromInput.status == 0 && fromInput.stdout.contains(piped.clientEmail), "\(fromInput.stderr)")
        let nothing = try await pushctl.run(
            ["app", "set-credentials", "--code", "gamma", "--service-account", "-"], environment: env, inputFile: "/dev/null")
        #expect(nothing.status != 0 && nothing.stderr.contains("no service account on standard input"), "\(nothing.stderr)")

        let list = try await pushctl.run(["app", "list"], environment: env)
        #expect(list.status == 0)
        #expect(list.stdout.contains("wowa-prod") && list.stdout.contains("beta-prod") && list.stdout.contains("gamma-prod"))
        for output in [added, plain, set, fromInput, nothing, list] {
            #expect(!output.stdout.contains("PRIVATE KEY") && !output.stderr.contains("PRIVATE KEY"))
        }
        // The key itself is stored as given, for the worker.
        let stored = try await database.withClient { client in
            var key = ""
            for try await value in try await client.query("SELECT fcm_private_key FROM apps WHERE code = 'beta'").decode(String.self) {
                key = value
            }
            return key
        }
        #expect(stored == rotated.privateKeyPEM)
    }

    @Test func badInputIsOneClearLineAndANonZeroExit() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let env = ["DATABASE_URL": database.url]
        _ = try await pushctl.run(["app", "add", "--code", "wowa", "--name", "Wowa"], environment: env)

        let garbage = FileManager.default.temporaryDirectory.appendingPathComponent("garbage-\(UUID()).json").path
        try Data("{\"type\":\"service_account\"}".utf8).write(to: URL(fileURLWithPath: garbage))
        let broken = FileManager.default.temporaryDirectory.appendingPathComponent("broken-\(UUID()).json").path
        try Data("{\n  \"type\": \"service_account\",\n}\n".utf8).write(to: URL(fileURLWithPath: broken))

        let cases: [([String], [String: String], String)] = [
            (["app", "add", "--code", "wowa", "--name", "Again"], env, "an app with code 'wowa' already exists"),
            (["app", "add", "--code", "Bad Code", "--name", "X"], env, "app code 'Bad Code' must be"),
            (
                ["app", "add", "--code", "x", "--name", "X", "--service-account", "/nonexistent.json"], env,
                "cannot read the service account file /nonexistent.json"
            ),
            (["app", "set-credentials", "--code", "wowa", "--service-account", garbage], env, "lacks 'project_id'"),
            (
                ["app", "add", "--code", "x", "--name", "X", "--service-account", broken], env,
                "pushctl: --service-account \(broken) is not valid JSON: unexpected '}' at line 3, column 1\n"
            ),
            (
                ["app", "set-credentials", "--code", "wowa", "--service-account", broken],
                ["DATABASE_URL": "postgres://u@127.0.0.1:1/x?sslmode=disable"],
                "pushctl: --service-account \(broken) is not valid JSON: unexpected '}' at line 3, column 1\n"
            ),
            (
                ["app", "set-credentials", "--code", "nope", "--service-account", try ServiceAccountFile.make().path], env,
                "no app with code 'nope'"
            ),
            (["app", "list"], [:], "DATABASE_URL is not set"),
            (
                ["app", "list"], ["DATABASE_URL": "postgres://u@127.0.0.1:1/x?sslmode=disable"],
                "cannot reach the database: connection refused at 127.0.0.1:1"
            ),
            (["app", "list"], ["DATABASE_URL": "mysql://nope"], "DATABASE_URL: expected postgres://"),
            (
                ["app", "add", "--code", "loud", "--name", "Loud", "--log-level", "loud"], env,
                "LOG_LEVEL: 'loud' is not one of trace, debug"
            ),
            (
                ["app", "add", "--code", "verbose", "--name", "Verbose"], env.merging(["LOG_LEVEL": "verbose"]) { $1 },
                "LOG_LEVEL: 'verbose' is not one of"
            ),
        ]
        for (arguments, environment, message) in cases {
            let result = try await pushctl.run(arguments, environment: environment)
            #expect(result.status != 0, "\(arguments) should fail")
            #expect(result.stderr.contains(message), "\(arguments): \(result.stderr)")
            #expect(result.stderr.split(separator: "\n").count == 1, "\(arguments): \(result.stderr)")
        }
        let apps = try await database.withClient { client in
            var n = 0
            for try await value in try await client.query("SELECT count(*)::int FROM apps").decode(Int.self) { n = value }
            return n
        }
        #expect(apps == 1)
    }

    @Test func setRateCapsAnAppsSendsAndUnlimitedLiftsTheCap() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let env = ["DATABASE_URL": database.url]
        for code in ["wowa", "beta"] { _ = try await pushctl.run(["app", "add", "--code", code, "--name", code], environment: env) }
        func rates() async throws -> String {
            try await database.text(
                "SELECT string_agg(code || ':' || COALESCE(max_sends_per_second::text, '-'), ',' ORDER BY code) FROM apps")
        }
        func listed() async throws -> [String: String] {
            let list = try await pushctl.run(["app", "list"], environment: env)
            let rows = list.stdout.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true).map(String.init) }
            #expect(rows.first?.last == "SENDS/S", "\(list.stdout)")
            return Dictionary(uniqueKeysWithValues: rows.dropFirst().map { ($0[1], $0.last ?? "") })
        }
        #expect(try await rates() == "beta:-,wowa:-")
        #expect(try await listed() == ["wowa": "unlimited", "beta": "unlimited"])

        let set = try await pushctl.run(["app", "set-rate", "--code", "wowa", "--per-second", "50"], environment: env)
        #expect(set.status == 0 && set.stdout == "app wowa: at most 50 sends per second\n", "\(set.stdout)\(set.stderr)")
        #expect(try await rates() == "beta:-,wowa:50")
        #expect(try await listed() == ["wowa": "50", "beta": "unlimited"])

        let lifted = try await pushctl.run(["app", "set-rate", "--code", "wowa", "--unlimited"], environment: env)
        #expect(lifted.status == 0 && lifted.stdout == "app wowa: no send rate cap\n", "\(lifted.stdout)\(lifted.stderr)")
        #expect(try await rates() == "beta:-,wowa:-")

        _ = try await pushctl.run(["app", "set-rate", "--code", "beta", "--per-second", "7"], environment: env)
        let refused: [([String], String)] = [
            (["--code", "nope", "--per-second", "10"], "pushctl: no app with code 'nope'"),
            (["--code", "nope", "--unlimited"], "pushctl: no app with code 'nope'"),
            (["--code", "beta", "--per-second", "0"], "--per-second must be a positive whole number of sends per second, not 0"),
            (["--code", "beta", "--per-second", "-5"], "--per-second must be a positive whole number of sends per second, not -5"),
            (["--code", "beta", "--per-second=-5"], "--per-second must be a positive whole number of sends per second, not -5"),
            (["--code", "beta", "--per-second", "2.5"], "The value '2.5' is invalid for '--per-second <per-second>'"),
            (
                ["--code", "beta", "--per-second", "99999999999"],
                "pushctl: the send rate must be 1 to 2147483647 sends per second, not 99999999999"
            ),
            (["--code", "beta"], "give --per-second N, or --unlimited"),
            (["--code", "beta", "--per-second", "5", "--unlimited"], "give --per-second or --unlimited, not both"),
        ]
        for (arguments, message) in refused {
            let result = try await pushctl.run(["app", "set-rate"] + arguments, environment: env)
            #expect(result.status != 0 && result.stderr.contains(message), "\(arguments): \(result.stderr)")
        }
        #expect(try await rates() == "beta:7,wowa:-")
    }

    @Test(arguments: [
        ["--help"], ["migrate", "--help"], ["app", "--help"], ["app", "add", "--help"], ["app", "set-credentials", "--help"],
        ["app", "set-rate", "--help"], ["app", "list", "--help"], ["retention", "--help"],
    ])
    func everyCommandHasHelp(_ arguments: [String]) async throws {
        let result = try await pushctl.run(arguments)
        #expect(result.status == 0)
        #expect(result.stdout.contains("USAGE:"))
    }

    /// While the database ends pushctl's sessions every 50 ms, every command ends within 20 s:
    /// done, or exit 1 with one line on stderr saying why (never PostgresNIO's generic text).
    /// PostgresNIO alone can leave a statement sent to a connection that has just closed
    /// unanswered for good (see DatabaseStatement), and the command with it.
    @Test(.timeLimit(.minutes(2)))
    func everyCommandEndsWhileItsSessionsAreBeingEnded() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let environment = ["DATABASE_URL": database.url]
        #expect(try await pushctl.run(["app", "add", "--code", "wowa", "--name", "Wowa"], environment: environment).status == 0)
        let churnEnds = ContinuousClock.now + .seconds(6)
        async let ended = database.endSessions(until: churnEnds)
        let commands = [
            ["app", "list"], ["app", "set-rate", "--code", "wowa", "--per-second", "50"], ["migrate"],
            ["app", "set-rate", "--code", "wowa", "--unlimited"],
        ]
        // Three operators at once, each running one command after another.
        let runs = try await withThrowingTaskGroup(of: [(arguments: [String], status: Int32?, log: String)].self) { group in
            for lane in 0..<3 {
                group.addTask {
                    var runs: [(arguments: [String], status: Int32?, log: String)] = []
                    while ContinuousClock.now < churnEnds {
                        let arguments = commands[(lane + runs.count) % commands.count]
                        let process = try pushctl.start(arguments, environment: environment)
                        let status = await process.exitStatusOrKill(within: .seconds(20))
                        runs.append((arguments, status, process.log))
                    }
                    return runs
                }
            }
            return try await group.reduce(into: []) { $0 += $1 }
        }
        let sessionsEnded = try await ended
        #expect(sessionsEnded >= 5, "only \(sessionsEnded) of pushctl's sessions were ended")
        for run in runs {
            let lines = run.log.split(separator: "\n")
            switch run.status {
            case 0: break
            case 1:
                #expect(
                    lines.count == 1 && lines[0].hasPrefix("pushctl: ") && !run.log.contains("PSQLError"), "\(run.arguments): \(run.log)")
            default: Issue.record("\(run.arguments) \(run.status.map { "exited \($0)" } ?? "still running after 20 s"): \(run.log)")
            }
        }
        let failures = runs.filter { $0.status != 0 }.map { $0.log.trimmingCharacters(in: .whitespacesAndNewlines) }
        print(
            "pushctl while its sessions were ended \(sessionsEnded) times: \(runs.count) runs, \(failures.count) failed: \(Set(failures))")
    }
}
