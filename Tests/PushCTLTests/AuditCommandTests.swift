import DeviceRegistry
import Foundation
import Logging
import TestSupport
import Testing

/// pushctl deliveries, devices and job --watch, as operators run them.
@Suite("pushctl audit: deliveries, devices, job --watch")
struct AuditCommandTests {
    let pushctl = BuiltProduct("pushctl")

    func setUp() async throws -> (TestDatabase, AuditScenario, [String: String]) {
        let database = try await TestPostgres.shared.makeDatabase()
        let scenario = try await database.withClient { try await AuditScenario.seed($0) }
        return (database, scenario, ["DATABASE_URL": database.url])
    }

    /// Runs pushctl; whatever it prints, no device token appears whole.
    func run(_ arguments: [String], _ environment: [String: String], sourceLocation: SourceLocation = #_sourceLocation) async throws
        -> BuiltProduct.Result
    {
        let result = try await pushctl.run(arguments, environment: environment)
        #expect(
            !(result.stdout + result.stderr).contains("secret-tail"), "\(arguments) shows a whole token", sourceLocation: sourceLocation)
        return result
    }

    static func records(_ json: String) -> [[String: Any]]? {
        (try? JSONSerialization.jsonObject(with: Data(json.utf8))) as? [[String: Any]]
    }

    static func ids(_ json: String) -> [Int64]? {
        records(json)?.compactMap { ($0["id"] as? NSNumber)?.int64Value }
    }

    /// RFC 4180 records: a quoted field may hold commas, line breaks and doubled quotes.
    static func csv(_ text: String) -> [[String]] {
        var (rows, row, field, quoted) = ([[String]](), [String](), "", false)
        var index = text.startIndex
        while index < text.endIndex {
            let c = text[index]
            index = text.index(after: index)
            if quoted {
                if c != "\"" {
                    field.append(c)
                } else if index < text.endIndex && text[index] == "\"" {
                    field.append(c)
                    index = text.index(after: index)
                } else {
                    quoted = false
                }
            } else if c == "\"" {
                quoted = true
            } else if c == "," {
                row.append(field)
                field = ""
            } else if c == "\n" {
                rows.append(row + [field])
                (row, field) = ([], "")
            } else {
                field.append(c)
            }
        }
        if !row.isEmpty || !field.isEmpty { rows.append(row + [field]) }
        return rows
    }

    // MARK: deliveries

    @Test func jsonIsOneArrayNewestFirstWithMaskedTokens() async throws {
        let (_, scenario, env) = try await setUp()
        let result = try await run(["deliveries", "--format", "json"], env)
        #expect(result.status == 0, "\(result.stderr)")
        let records = try #require(Self.records(result.stdout), "\(result.stdout)")
        #expect(records.compactMap { ($0["id"] as? NSNumber)?.int64Value } == scenario.deliveries.reversed())
        #expect(records.compactMap { $0["token"] as? String } == [1, 0, 2, 1, 0].map(AuditScenario.masked))
        let failed = try #require(records.first { $0["status"] as? String == "failed" })
        #expect(failed["errorMessage"] as? String == AuditScenario.failure.message && failed["appCode"] as? String == "wowa")
        #expect(failed["updatedAt"] as? String == "2020-06-01T00:00:00.000Z")
        let none = try await run(["deliveries", "--format", "json", "--app", "nope"], env)
        #expect(none.status == 0 && Self.ids(none.stdout) == [])
    }

    @Test func csvHasAHeaderAndQuotesAsRFC4180() async throws {
        let (_, scenario, env) = try await setUp()
        let result = try await run(["deliveries", "--format", "csv"], env)
        #expect(result.status == 0, "\(result.stderr)")
        let rows = Self.csv(result.stdout)
        try #require(rows.count == 6, "\(result.stdout)")
        #expect(
            rows[0] == [
                "id", "job_id", "user_id", "app", "platform", "token", "status", "attempts", "updated_at", "error_code",
                "error_message", "fcm_message_id", "device_id", "created_at", "dry_run",
            ])
        #expect(rows.allSatisfy { $0.count == 15 }, "\(rows)")
        #expect(rows.dropFirst().allSatisfy { $0[14] == "false" })
        #expect(rows.dropFirst().map { Int64($0[0]) } == scenario.deliveries.reversed())
        #expect(rows.dropFirst().map { $0[5] } == [1, 0, 2, 1, 0].map(AuditScenario.masked))
        let failed = rows[4]
        #expect(failed[6] == "failed" && failed[9] == "UNREGISTERED" && failed[10] == AuditScenario.failure.message && failed[7] == "2")
        #expect(result.stdout.contains(#","Requested entity was not found, ""gone""","#))
        #expect(rows[5][11] == "projects/wowa/messages/0:1" && rows[5][8] == "2020-06-01T00:00:00.000Z")
    }

    /// FCM's error text is not ours to trust: a cell a spreadsheet would run as a formula is
    /// written as text, with a leading `'`, as the console's export writes it.
    @Test func csvNeverHandsASpreadsheetAFormula() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        try await database.seed { seed in
            let app = try await seed.app("wowa")
            let device = try await seed.device(app: app, user: 1, token: "formula-token-secret-tail")
            let job = try await seed.job(users: [1])
            try await seed.delivery(
                job: job, device: device, status: .failed, errorCode: "INTERNAL", errorMessage: "=HYPERLINK(\"http://evil.example\")")
        }
        let result = try await run(["deliveries", "--format", "csv"], ["DATABASE_URL": database.url])
        #expect(result.status == 0, "\(result.stderr)")
        let rows = Self.csv(result.stdout)
        try #require(rows.count == 2, "\(result.stdout)")
        #expect(rows[1][10] == #"'=HYPERLINK("http://evil.example")"#, "\(result.stdout)")
    }

    @Test func tableHasAHeaderRowAndARowPerDelivery() async throws {
        let (_, scenario, env) = try await setUp()
        let result = try await run(["deliveries"], env)
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.stdout.split(separator: "\n").map(String.init)
        try #require(lines.count == 6, "\(result.stdout)")
        #expect(
            lines[0].split(separator: " ", omittingEmptySubsequences: true) == [
                "ID", "JOB", "USER", "APP", "PLATFORM", "TOKEN", "STATUS", "ATTEMPTS", "UPDATED", "ERROR",
            ])
        let firstColumn: [String] = lines.dropFirst().map { String($0.prefix { $0 != " " }) }
        #expect(firstColumn == scenario.deliveries.reversed().map { String($0) })
        #expect(lines[4].contains(AuditScenario.masked(1)) && lines[4].hasSuffix("UNREGISTERED: \(AuditScenario.failure.message)"))
        let none = try await run(["deliveries", "--status", "failed", "--app", "beta"], env)
        #expect(none.status == 0 && none.stdout == "no deliveries match\n")
        // A dry run's sent delivery was FCM's check, not a delivery: the table says so.
        try await TestPostgres.withClient(url: try #require(env["DATABASE_URL"])) { client in
            try await client.query("UPDATE push_jobs SET validate_only = true WHERE id = \(scenario.jobs[0])")
        }
        let dryRun = try await run(["deliveries", "--job", String(scenario.jobs[0]), "--status", "sent"], env)
        #expect(dryRun.status == 0 && dryRun.stdout.contains(" sent (dry run) "), "\(dryRun.stdout)")
    }

    @Test func filtersSelectTheSameRowsAsTheHTTPAudit() async throws {
        let (_, scenario, env) = try await setUp()
        for query in AuditScenario.queries {
            let result = try await run(["deliveries", "--format", "json"] + query.arguments(scenario), env)
            #expect(
                result.status == 0 && Self.ids(result.stdout) == query.expectedIDs(scenario), "\(query): \(result.stdout)\(result.stderr)")
        }
        let limited = try await run(["deliveries", "--format", "json", "--limit", "2", "--app", "wowa"], env)
        #expect(Self.ids(limited.stdout) == [scenario.deliveries[4], scenario.deliveries[3]])
    }

    @Test func badOptionsAreOneLineOnStderrAndANonZeroExit() async throws {
        let (_, _, env) = try await setUp()
        let cases = [
            (["--status", "delivered"], "--status must be one of pending, sent, failed, skipped"),
            (["--since", "yesterday"], "--since 'yesterday' is not an ISO 8601 time"),
            (["--since", "2026-12-01T09:00:00"], "--since '2026-12-01T09:00:00' is not an ISO 8601 time"),
            (["--limit", "0"], "--limit must be at least 1"),
        ]
        for (arguments, message) in cases {
            let result = try await run(["deliveries"] + arguments, env)
            #expect(result.status != 0 && result.stdout.isEmpty, "\(arguments)")
            #expect(result.stderr.contains(message) && result.stderr.split(separator: "\n").count == 1, "\(arguments): \(result.stderr)")
        }
        for arguments in [["--format", "xml"], ["--job", "abc"]] {
            let result = try await run(["deliveries"] + arguments, env)
            #expect(result.status != 0 && result.stdout.isEmpty && result.stderr.contains(arguments[0]), "\(arguments): \(result.stderr)")
        }
    }

    @Test func aLargeLogStreamsOutComplete() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let count = 20_000
        let job = try await database.seed { seed in
            let app = try await seed.app("wowa")
            try await seed.run(
                """
                INSERT INTO push_devices (user_id, app_id, token, platform)
                SELECT g, \(app), 'stream-token-' || g || '-secret-tail', 'android' FROM generate_series(1, \(count)) g
                """)
            let job = try await seed.job(users: nil)
            try await seed.run(
                """
                INSERT INTO push_deliveries (job_id, device_id, status, error_code, error_message, job_created_at, app_id)
                SELECT \(job), d.id, 'failed', 'INTERNAL', 'a, "quoted" message', j.created_at, j.app_id
                  FROM push_devices d, push_jobs j WHERE j.id = \(job)
                """)
            return job
        }
        let result = try await run(["deliveries", "--format", "csv", "--job", "\(job)"], ["DATABASE_URL": database.url])
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines.count == count + 2 && lines.last == "", "\(lines.count) lines")
        let ids = lines.dropFirst().dropLast().compactMap { Int64($0.prefix { $0 != "," }) }
        #expect(ids.count == count && zip(ids, ids.dropFirst()).allSatisfy { $0 > $1 })
    }

    // MARK: devices

    @Test func devicesListsAnAppsDevicesMaskedWithTheirState() async throws {
        let (database, _, env) = try await setUp()
        let retired = "wowa-user1-old-phone-secret-tail-9"
        // 34 characters: the listing shows half of them, 17 (never more than half of a token).
        let retiredMasked = "wowa-user1-old-ph…"
        try await database.seed { seed in
            let wowa = try await seed.app("wowa")
            let id = try await seed.device(app: wowa, user: 1, token: retired, platform: "android")
            _ = try await DeviceDirectory(client: seed.client).deactivate(deviceID: id, userID: 1, appID: wowa, logger: Logger(label: "t"))
        }
        func rows(_ arguments: [String]) async throws -> [[String]] {
            let result = try await run(["devices"] + arguments, env)
            #expect(result.status == 0, "\(arguments): \(result.stderr)")
            let lines = result.stdout.split(separator: "\n")
            #expect(
                lines.first?.split(separator: " ") == [
                    "ID", "USER", "PLATFORM", "TOKEN", "TYPE", "DEVICE", "ACTIVE", "LAST", "USED", "DEACTIVATED",
                ])
            return lines.dropFirst().map { $0.split(separator: " ").map(String.init) }
        }
        // ID USER PLATFORM TOKEN TYPE DEVICE ACTIVE LAST-USED DEACTIVATED…; active first.
        let user1 = try await rows(["--app", "wowa", "--user", "1"])
        #expect(user1.map { [$0[1], $0[3], $0[6]] } == [["1", AuditScenario.masked(0), "yes"], ["1", retiredMasked, "no"]])
        #expect(user1.last?.last == "(logout)" && user1.first?.last == "-")
        let everyone = try await rows(["--app", "wowa"])
        #expect(Set(everyone.map { $0[3] }) == [AuditScenario.masked(0), AuditScenario.masked(1), retiredMasked])
        #expect(everyone.last?[6] == "no")
        #expect(try await rows(["--app", "beta", "--user", "1"]).map { $0[3] } == [AuditScenario.masked(2)])

        let nobody = try await run(["devices", "--app", "wowa", "--user", "9"], env)
        #expect(nobody.status == 0 && nobody.stdout == "user 9 has no devices in wowa\n")
        let unknown = try await run(["devices", "--app", "nope"], env)
        #expect(
            unknown.status != 0 && unknown.stderr.contains("no app with code 'nope'") && unknown.stderr.split(separator: "\n").count == 1)
    }

    // MARK: job --watch

    @Test(arguments: ["completed", "failed", "cancelled"])
    func watchFollowsAJobToItsEnd(_ ending: String) async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let job = try await database.seed { seed in
            let app = try await seed.app("wowa")
            let job = try await seed.job(users: [1, 2, 3, 4])
            for user in Int64(1)...4 {
                try await seed.delivery(job: job, device: try await seed.device(app: app, user: user, token: "watch-token-\(user)"))
            }
            try await seed.expanded(job)
            return job
        }
        let watcher = try pushctl.start(["job", "\(job)", "--watch", "--interval", "0.2"], environment: ["DATABASE_URL": database.url])
        // What workers would write: half sent, then the end; each step once the watcher has shown the previous one
        // (a line per change, flushed as it goes: someone is tailing that log).
        #expect(try await Self.wait(for: watcher, toShow: "0%  0/4"), "no progress line while the job runs")
        try await database.seed { seed in
            try await seed.run("UPDATE push_jobs SET status = 'running' WHERE id = \(job)")
            try await seed.run(
                "UPDATE push_deliveries SET status = 'sent', attempts = 1 WHERE id IN (SELECT id FROM push_deliveries ORDER BY id LIMIT 2)")
        }
        #expect(try await Self.wait(for: watcher, toShow: "50%  2/4"), "no progress line while the job runs")
        try await database.seed { seed in
            switch ending {
            case "completed":
                try await seed.run("UPDATE push_deliveries SET status = 'sent' WHERE status = 'pending'")
                try await seed.run("UPDATE push_jobs SET status = 'completed', finished_at = now() WHERE id = \(job)")
            case "failed":
                try await seed.run(
                    "UPDATE push_deliveries SET status = 'failed', error_code = 'PERMISSION_DENIED' WHERE status = 'pending'")
                try await seed.run(
                    "UPDATE push_jobs SET status = 'failed', finished_at = now(), last_error = 'app wowa: permission denied' WHERE id = \(job)"
                )
            default:
                #expect(try await JobDirectory(client: seed.client, logger: Logger(label: "t")).cancel(job) == .cancelled)
            }
        }
        let status = await watcher.exitStatusOrKill(within: .seconds(20))
        #expect(status == (ending == "completed" ? 0 : 1), "\(watcher.log)")
        let progress = watcher.log.split(separator: "\n").filter { $0.hasPrefix("[") }
        let percents = progress.compactMap { line in
            line.split(separator: "]").last?.split(separator: "%").first.flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }
        }
        #expect(percents.count == progress.count && percents.first == 0 && percents.contains(50) && percents.last == 100, "\(watcher.log)")
        #expect(zip(percents, percents.dropFirst()).allSatisfy { $0 <= $1 } && Set(progress).count == progress.count)
        #expect(progress.last?.hasSuffix(" \(ending)") == true && progress.last?.contains("4/4") == true, "\(watcher.log)")
        #expect(watcher.log.contains("job \(job) (app wowa): \(ending)"))
        if ending == "failed" { #expect(watcher.log.contains("first error: app wowa: permission denied")) }
    }

    /// A job cancelled while a worker's sends are in flight: those are recorded when their answers
    /// come, and the watcher waits for them rather than report them as never sent.
    @Test func watchWaitsForTheSendsInFlightWhenAJobEnds() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let job = try await database.seed { seed in
            let app = try await seed.app("wowa")
            let job = try await seed.job(users: [1, 2, 3, 4])
            for user in Int64(1)...4 {
                try await seed.delivery(job: job, device: try await seed.device(app: app, user: user, token: "flight-token-\(user)"))
            }
            try await seed.expanded(job)
            try await seed.run("UPDATE push_jobs SET status = 'running' WHERE id = \(job)")
            // Two sent; two held by a live worker, their sends in flight.
            try await seed.run(
                "UPDATE push_deliveries SET status = 'sent', attempts = 1 WHERE id IN (SELECT id FROM push_deliveries ORDER BY id LIMIT 2)")
            try await seed.run(
                """
                UPDATE push_deliveries SET lease_owner = 'live-worker', next_attempt_at = now() + interval '1 minute'
                 WHERE status = 'pending'
                """)
            #expect(try await JobDirectory(client: seed.client, logger: Logger(label: "t")).cancel(job) == .cancelled)
            return job
        }
        let watcher = try pushctl.start(["job", "\(job)", "--watch", "--interval", "0.2"], environment: ["DATABASE_URL": database.url])
        #expect(try await Self.wait(for: watcher, toShow: "50%  2/4"), "\(watcher.log)")
        try await Task.sleep(for: .milliseconds(600))
        #expect(!watcher.log.contains("job \(job) (app wowa)"), "the report came before the sends in flight were recorded")
        try await database.seed { seed in
            try await seed.run("UPDATE push_deliveries SET status = 'sent', attempts = 1, lease_owner = NULL WHERE status = 'pending'")
        }
        #expect(await watcher.exitStatusOrKill(within: .seconds(20)) == 1, "\(watcher.log)")
        #expect(watcher.log.contains("job \(job) (app wowa): cancelled"), "\(watcher.log)")
        #expect(watcher.log.split(separator: "\n").last { $0.hasPrefix("[") }?.contains("4/4") == true, "\(watcher.log)")
    }

    /// True once `product` has written `text`, false after 5 seconds without.
    static func wait(for product: RunningProduct, toShow text: String) async throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(5)
        while !product.log.contains(text) && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
        return product.log.contains(text)
    }

    @Test func watchRefusesAMissingJobAndABadInterval() async throws {
        let (_, scenario, env) = try await setUp()
        for (arguments, message) in [
            (["job", "999", "--watch"], "no job 999"),
            (["job", "\(scenario.jobs[0])", "--watch", "--interval", "0"], "--interval must be positive"),
        ] {
            let result = try await run(arguments, env)
            #expect(
                result.status != 0 && result.stderr.contains(message) && result.stderr.split(separator: "\n").count == 1, "\(result.stderr)"
            )
        }
    }

    @Test(arguments: [
        ("deliveries", ["--job", "--user", "--app", "--status", "--since", "--limit", "--format", "--database-url", "--log-level"]),
        ("devices", ["--app", "--user", "--limit", "--database-url", "--log-level"]),
        ("job", ["<id>", "--watch", "--interval", "--database-url", "--log-level"]),
    ])
    func helpNamesEveryOption(_ command: String, _ options: [String]) async throws {
        let result = try await pushctl.run([command, "--help"])
        #expect(result.status == 0 && result.stdout.contains("USAGE:"))
        for option in options { #expect(result.stdout.contains(option), "\(command) --help lacks \(option)") }
    }
}
