import AsyncHTTPClient
import DeviceRegistry
import FCMEmulator
import Foundation
import NIOCore
import NIOFoundationCompat
import PostgresNIO
import TestSupport
import Testing

/// push-api, push-worker and pushctl as built, with DATABASE_URL through Debian's PgBouncer in
/// transaction pooling mode (1.18: no named prepared statement survives a transaction) and
/// `?pooler=transaction`. PgBouncer has 2 server connections for the programs' 8 each, so
/// consecutive statements of one client connection land on different server sessions.
@Suite("Through PgBouncer in transaction mode", .timeLimit(.minutes(3)))
struct PgBouncerTests {
    let api = BuiltProduct("push-api")
    let worker = BuiltProduct("push-worker")
    let pushctl = BuiltProduct("pushctl")
    static let adminToken = "pgbouncer-tests-admin-token"

    func workerEnvironment(_ fixture: WorkerFixture, databaseURL: String, listenURL: String? = nil) -> [String: String] {
        [
            "DATABASE_URL": databaseURL, "DATABASE_LISTEN_URL": listenURL ?? "", "FCM_BASE_URL": fixture.emulator.baseURL,
            "GOOGLE_TOKEN_URL": fixture.emulator.tokenURL, "PUSH_CA_FILE": fixture.emulator.caFilePath ?? "",
            "WORKER_CONCURRENCY": "32", "LOG_LEVEL": "info",
        ]
    }

    /// Runs `body` with the product started, then stops it with SIGTERM and expects a clean exit.
    func running<T: Sendable>(
        _ product: BuiltProduct, _ environment: [String: String], _ body: (RunningProduct) async throws -> T
    ) async throws -> T {
        let process = try product.start(environment: environment)
        let result: Result<T, any Error>
        do { result = .success(try await body(process)) } catch { result = .failure(error) }
        process.signal(SIGTERM)
        let status = await process.exitStatus(within: .seconds(20))
        #expect(status == 0, "\(process.log)")
        return try result.get()
    }

    /// A GET, or a POST of `json`.
    func request(_ url: String, bearer: String, json: String? = nil) async throws -> (status: Int, body: [String: Any]) {
        var request = HTTPClientRequest(url: url)
        request.method = json == nil ? .GET : .POST
        request.headers.add(name: "Authorization", value: "Bearer \(bearer)")
        if let json {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(ByteBuffer(string: json))
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(10))
        let bytes = try await response.body.collect(upTo: 1 << 20)
        let body = (try? JSONSerialization.jsonObject(with: Data(buffer: bytes))) as? [String: Any] ?? [:]
        return (Int(response.status.code), body)
    }

    func waitUntilServing(_ port: Int, _ process: RunningProduct) async throws {
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            let response = try? await HTTPClient.shared.execute(
                HTTPClientRequest(url: "http://127.0.0.1:\(port)/readyz"), timeout: .seconds(2))
            if response?.status == .ok { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        Issue.record("push-api did not become ready: \(process.log)")
        throw CancellationError()
    }

    /// 40 users register at once through push-api (their registrations batched onto 8 client
    /// connections, and those onto 2 server sessions), an admin queues a notification to them,
    /// and push-worker, hearing of it by polling since LISTEN cannot cross the pooler, delivers
    /// it to the emulator: every device once, every delivery row `sent`, read back through
    /// push-api's admin API.
    @Test func registrationsAndADeliveryThroughThePooler() async throws {
        try await WorkerFixture.with { fixture in
            try await PgBouncer.withRunning(inFrontOf: fixture.database) { bouncer in
                let pooled = bouncer.url(for: fixture.database) + "&pool_max=8"
                let port = try LocalCluster.freePort()
                let apiEnvironment = [
                    "DATABASE_URL": pooled, "JWT_SECRET": TokenMint.secret, "PUSH_ADMIN_TOKEN": Self.adminToken,
                    "API_PORT": "\(port)", "LOG_LEVEL": "info",
                ]
                let users = Array(Int64(1)...40)
                let job = try await running(api, apiEnvironment) { process in
                    try await waitUntilServing(port, process)
                    let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                        for user in users {
                            group.addTask {
                                let bearer = TokenMint.sign(TokenMint.claims(userID: user, appID: fixture.appID))
                                return try await request(
                                    "http://127.0.0.1:\(port)/push/devices", bearer: bearer,
                                    json: #"{"token":"pgb-dev-\#(user)","platform":"android"}"#
                                ).status
                            }
                        }
                        return try await group.reduce(into: []) { $0.append($1) }
                    }
                    #expect(statuses.allSatisfy { $0 == 201 }, "\(statuses) \(process.log)")
                    let queued = try await request(
                        "http://127.0.0.1:\(port)/push/notifications", bearer: Self.adminToken,
                        json:
                            #"{"appCode":"wowa","userIds":[\#(users.map(String.init).joined(separator: ","))],"message":{"notification":{"title":"Pooled"}}}"#
                    )
                    #expect(queued.status == 202, "\(queued.body)")
                    let job = try #require((queued.body["jobId"] as? NSNumber)?.int64Value)

                    let workerLog = try await running(worker, workerEnvironment(fixture, databaseURL: pooled)) { process in
                        let finished = try await fixture.finished(job, within: .seconds(60))
                        #expect(finished.status == "completed", "\(process.log)")
                        return process.log
                    }
                    #expect(workerLog.contains("push.job_wakeups=polling"), "\(workerLog)")
                    #expect(workerLog.contains("found by polling"))

                    let summary = try await request("http://127.0.0.1:\(port)/admin/jobs/\(job)", bearer: Self.adminToken)
                    #expect(summary.status == 200)
                    #expect((summary.body["sent"] as? NSNumber)?.intValue == 40, "\(summary.body)")
                    #expect(summary.body["status"] as? String == "completed")
                    #expect(!process.log.contains("prepared statement"), "\(process.log)")
                    return job
                }
                let rows = try await fixture.deliveries(job)
                #expect(rows.count == 40 && rows.values.allSatisfy { $0.status == "sent" })
                #expect(users.allSatisfy { fixture.emulator.stats(for: "pgb-dev-\($0)").accepted == 1 })
                let devices = try await fixture.sql { try await count($0, "SELECT count(*)::int FROM push_devices WHERE is_active") }
                #expect(devices == 40)
                // Both programs logged in through PgBouncer, not around it.
                #expect(bouncer.logins(to: fixture.database) >= 2, "\(bouncer.log)")
            }
        }
    }

    /// With DATABASE_LISTEN_URL, a direct connection holds the LISTEN while everything else
    /// goes through the pooler; a job queued through pushctl is delivered.
    @Test func listenTakesTheDirectConnection() async throws {
        try await WorkerFixture.with { fixture in
            try await fixture.register(["listen-dev-1", "listen-dev-2"])
            try await PgBouncer.withRunning(inFrontOf: fixture.database) { bouncer in
                let pooled = bouncer.url(for: fixture.database)
                let environment = workerEnvironment(fixture, databaseURL: pooled, listenURL: fixture.database.url)
                try await running(worker, environment) { process in
                    // The direct session LISTENs, to new jobs and endings (PgBouncer's server
                    // sessions never run LISTEN).
                    let deadline = ContinuousClock.now + .seconds(20)
                    var listeners = 0
                    while listeners == 0, ContinuousClock.now < deadline {
                        listeners = try await fixture.sql { client in
                            try await count(
                                client,
                                """
                                SELECT count(*)::int FROM pg_stat_activity
                                 WHERE datname = \(fixture.database.name) AND query LIKE 'LISTEN %'
                                """)
                        }
                        try await Task.sleep(for: .milliseconds(100))
                    }
                    #expect(listeners == 1, "\(process.log)")
                    let sent = try await pushctl.run(
                        ["send", "--app", "wowa", "--user", "1", "--user", "2", "--title", "Heard"], environment: ["DATABASE_URL": pooled])
                    #expect(sent.status == 0, "\(sent.stderr)")
                    let job = try #require(Int64(sent.stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
                    #expect(try await fixture.finished(job, within: .seconds(30)).status == "completed", "\(process.log)")
                    #expect(process.log.contains("push.job_wakeups=\"listen on DATABASE_LISTEN_URL\""), "\(process.log)")
                }
            }
        }
    }

    /// A listen URL through the pooler would LISTEN on a session nobody keeps: refused at start.
    @Test func aListenURLThroughThePoolerIsRefused() async throws {
        let result = try await worker.run(
            [],
            environment: [
                "DATABASE_URL": "postgres://u@127.0.0.1:1/db?pooler=transaction",
                "DATABASE_LISTEN_URL": "postgres://u@127.0.0.1:1/db?pooler=transaction",
            ])
        #expect(result.status != 0)
        #expect(result.stderr.contains("DATABASE_LISTEN_URL: LISTEN needs a session that lasts"), "\(result.stderr)")
    }

    /// pushctl through the pooler: three concurrent migrations of an empty database apply each
    /// file once and leave no advisory lock behind on any server session; then the operator's
    /// commands (an app, a send, the job and the audit) work as they do directly.
    @Test func pushctlThroughThePooler() async throws {
        let database = try await TestPostgres.shared.makeEmptyDatabase()
        try await PgBouncer.withRunning(inFrontOf: database) { bouncer in
            let environment = ["DATABASE_URL": bouncer.url(for: database)]
            let runs = try await withThrowingTaskGroup(of: BuiltProduct.Result.self) { group in
                for _ in 0..<3 { group.addTask { try await pushctl.run(["migrate"], environment: environment) } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(runs.allSatisfy { $0.status == 0 }, "\(runs.map(\.stderr))")
            let applied = runs.flatMap { run in
                run.stdout.hasPrefix("applied: ")
                    ? run.stdout.dropFirst("applied: ".count).trimmingCharacters(in: .whitespacesAndNewlines).components(separatedBy: ", ")
                    : []
            }
            let bundled = try MigrationRunner.bundled().migrations.map(\.version)
            #expect(applied.sorted() == bundled)
            let (recorded, advisoryLocks) = try await database.withClient { client in
                (
                    try await count(client, "SELECT count(*)::int FROM schema_migrations"),
                    try await count(
                        client,
                        "SELECT count(*)::int FROM pg_locks l JOIN pg_database d ON d.oid = l.database WHERE l.locktype = 'advisory' AND d.datname = current_database()"
                    )
                )
            }
            #expect(recorded == bundled.count && advisoryLocks == 0)
            let add = try await pushctl.run(["app", "add", "--code", "wowa", "--name", "Wowa"], environment: environment)
            #expect(add.status == 0, "\(add.stderr)")
            try await database.withClient { client in
                _ = try await client.query(
                    """
                    INSERT INTO push_devices (user_id, app_id, token, platform)
                    SELECT 7, id, 'ctl-dev-7', 'android' FROM apps WHERE code = 'wowa'
                    """)
            }
            let sent = try await pushctl.run(["send", "--app", "wowa", "--user", "7", "--title", "Hi"], environment: environment)
            #expect(sent.status == 0, "\(sent.stderr)")
            let job = sent.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            let shown = try await pushctl.run(["job", job], environment: environment)
            #expect(shown.status == 0 && shown.stdout.contains("queued"), "\(shown.stdout)\(shown.stderr)")
            let jobs = try await pushctl.run(["jobs"], environment: environment)
            #expect(jobs.status == 0 && jobs.stdout.contains(job), "\(jobs.stderr)")
            let devices = try await pushctl.run(["devices", "--app", "wowa", "--user", "7"], environment: environment)
            #expect(devices.status == 0 && devices.stdout.contains("ctl-dev-7".prefix(4)), "\(devices.stdout)\(devices.stderr)")
            let audit = try await pushctl.run(["deliveries", "--job", job, "--format", "json"], environment: environment)
            #expect(audit.status == 0 && audit.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "[]", "\(audit.stderr)")
            #expect(bouncer.logins(to: database) >= 8, "\(bouncer.log)")
        }
    }
}
