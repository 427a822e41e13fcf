import DeviceRegistry
import FCMEmulator
import Foundation
import PostgresNIO
import PushDispatch
import TestSupport
import Testing

/// push-worker as deployed: a process that gets SIGTERM on deploys and SIGKILL on crashes.
@Suite("push-worker process lifecycle", .timeLimit(.minutes(3)))
struct WorkerProcessTests {
    let worker = BuiltProduct("push-worker")

    func environment(_ fixture: WorkerFixture, concurrency: Int, lease: Int = 5) -> [String: String] {
        [
            "DATABASE_URL": fixture.database.url, "FCM_BASE_URL": fixture.emulator.baseURL,
            "GOOGLE_TOKEN_URL": fixture.emulator.tokenURL, "PUSH_CA_FILE": fixture.emulator.caFilePath ?? "",
            "WORKER_CONCURRENCY": "\(concurrency)", "WORKER_LEASE_SECONDS": "\(lease)", "LOG_LEVEL": "info",
        ]
    }

    func seed(_ fixture: WorkerFixture, count: Int, prefix: String) async throws -> [String] {
        _ = try await fixture.sql { client in
            try await client.query(
                """
                INSERT INTO push_devices (user_id, app_id, token, platform)
                SELECT g, \(fixture.appID), \(prefix) || g, 'android' FROM generate_series(1, \(count)) g
                """)
        }
        return (1...count).map { "\(prefix)\($0)" }
    }

    func sentCount(_ fixture: WorkerFixture, _ job: Int64) async throws -> Int {
        try await fixture.sql { client in
            for try await n in try await client.query("SELECT count(*)::int FROM push_deliveries WHERE job_id = \(job) AND status = 'sent'")
                .decode(Int.self)
            { return n }
            return 0
        }
    }

    func waitForSends(_ fixture: WorkerFixture, _ job: Int64, atLeast: Int) async throws {
        let deadline = ContinuousClock.now + .seconds(20)
        while try await sentCount(fixture, job) < atLeast, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
    }

    @Test func sigtermDrainsInFlightSendsAndNothingIsSentTwice() async throws {
        try await WorkerFixture.with { fixture in
            fixture.emulator.script(tokenPrefix: "slow-dev-", .slow(.milliseconds(200)))
            let tokens = try await seed(fixture, count: 300, prefix: "slow-dev-")
            let job = try await fixture.campaign()
            let first = try worker.start(environment: environment(fixture, concurrency: 40))
            try await waitForSends(fixture, job, atLeast: 40)
            first.signal(SIGTERM)
            let status = await first.exitStatus(within: .seconds(20))
            #expect(status == 0, "\(first.log)")
            #expect(first.log.contains("dispatcher stopped"))
            // Everything it claimed was settled or handed over: no lease of the stopped worker is
            // left (devices claimed and not yet sent are released for the next worker at once).
            let leftover = try await fixture.sql { client in
                try await count(
                    client,
                    """
                    SELECT ((SELECT count(*) FROM push_deliveries WHERE lease_owner IS NOT NULL)
                            + (SELECT count(*) FROM push_job_chunks WHERE lease_until > now()))::int
                    """)
            }
            #expect(leftover == 0)
            let second = try worker.start(environment: environment(fixture, concurrency: 40))
            #expect(try await fixture.finished(job, within: .seconds(60)).status == "completed")
            second.signal(SIGTERM)
            _ = await second.exitStatus(within: .seconds(20))
            #expect(tokens.allSatisfy { fixture.emulator.stats(for: $0).accepted == 1 })
        }
    }

    /// At `LOG_LEVEL=debug` ServiceLifecycle logs each service as it starts, by its description:
    /// the dispatcher's settings hold DATABASE_URL, whose password must not be printed. (The
    /// throwaway cluster trusts local connections, so a password added here is not checked.)
    @Test func aDebugLogHoldsNoDatabasePassword() async throws {
        try await WorkerFixture.with { fixture in
            var url = try #require(URLComponents(string: fixture.database.url))
            if url.password == nil { url.password = "not-in-any-log-5f3a9c" }
            let password = try #require(url.password)
            var environment = environment(fixture, concurrency: 8)
            environment["DATABASE_URL"] = try #require(url.string)
            environment["LOG_LEVEL"] = "debug"
            let process = try worker.start(environment: environment)
            let deadline = ContinuousClock.now + .seconds(20)
            while !process.log.contains("sl-service=\"Dispatcher"), ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(50))
            }
            process.signal(SIGTERM)
            #expect(await process.exitStatus(within: .seconds(20)) == 0, "\(process.log.suffix(3000))")
            #expect(process.log.contains("sl-service=\"Dispatcher(worker: "), "\(process.log.suffix(3000))")
            #expect(!process.log.contains(password))
        }
    }

    /// A crash loses the crashed worker's in-flight sends' results: those deliveries are sent
    /// again after their lease runs out. The duplicates are bounded by its concurrency.
    @Test func sigkilledWorkersDeliveriesAreTakenOverAfterTheLease() async throws {
        try await WorkerFixture.with { fixture in
            fixture.emulator.script(tokenPrefix: "crash-dev-", .slow(.milliseconds(500)))
            let tokens = try await seed(fixture, count: 200, prefix: "crash-dev-")
            let job = try await fixture.campaign()
            let concurrency = 20
            let doomed = try worker.start(environment: environment(fixture, concurrency: concurrency, lease: 5))
            try await waitForSends(fixture, job, atLeast: 20)
            doomed.signal(SIGKILL)
            #expect(await doomed.exitStatus(within: .seconds(5)) != nil)
            let acceptedAtKill = fixture.emulator.stats.accepted
            #expect(acceptedAtKill < 100, "the crash must happen mid-campaign")
            let started = ContinuousClock.now
            let survivor = try worker.start(environment: environment(fixture, concurrency: concurrency, lease: 5))
            #expect(try await fixture.finished(job, within: .seconds(90)).status == "completed")
            let tookOver = ContinuousClock.now - started
            survivor.signal(SIGTERM)
            _ = await survivor.exitStatus(within: .seconds(20))
            let accepted = tokens.map { fixture.emulator.stats(for: $0).accepted }
            #expect(accepted.allSatisfy { $0 >= 1 }, "every device got its notification")
            let duplicates = accepted.reduce(0) { $0 + max(0, $1 - 1) }
            print(
                "after SIGKILL with \(acceptedAtKill) sends done: \(duplicates) duplicate sends of \(tokens.count), finished \(tookOver) later"
            )
            // Bound: what the crashed worker had in flight, or sent without recording the result.
            #expect(duplicates <= concurrency, "duplicates: \(duplicates)")
            // Its leased deliveries were taken over after the 5 s lease, not never, and the log says so.
            #expect(tookOver < .seconds(30))
            #expect(survivor.log.contains("took over chunks whose worker's lease ran out"), "\(survivor.log.suffix(3000))")
            let rows = try await fixture.deliveries(job)
            #expect(rows.count == 200 && rows.values.allSatisfy { $0.status == "sent" })
        }
    }

    /// 64 slow devices taken as one chunk by a worker that dies before any answer; then a worker
    /// with room for 16 takes the chunk over: 16 in flight, 48 held back when this returns.
    /// Returns the job, the tokens, the second worker and what the emulator had accepted per
    /// token before it sent anything.
    func takeOverWithDevicesHeldBack(_ fixture: WorkerFixture, prefix: String) async throws
        -> (job: Int64, tokens: [String], worker: RunningProduct, acceptedBefore: [String: Int])
    {
        fixture.emulator.script(tokenPrefix: prefix, .slow(.seconds(1)))
        let tokens = try await seed(fixture, count: 64, prefix: prefix)
        let job = try await fixture.campaign()
        func chunkOwners() async throws -> [String] {
            try await fixture.sql { client in
                var owners: [String] = []
                for try await owner in try await client.query("SELECT lease_owner FROM push_job_chunks").decode(String.self) {
                    owners.append(owner)
                }
                return owners
            }
        }
        let crashed = try worker.start(environment: environment(fixture, concurrency: 64, lease: 5))
        var owners: [String] = []
        let deadline = ContinuousClock.now + .seconds(20)
        while owners.isEmpty, ContinuousClock.now < deadline {
            owners = try await chunkOwners()
            try await Task.sleep(for: .milliseconds(10))
        }
        crashed.signal(SIGKILL)
        #expect(await crashed.exitStatus(within: .seconds(5)) != nil)
        let sentBeforeCrash = try await sentCount(fixture, job)
        #expect(owners.count == 1 && sentBeforeCrash == 0)

        // The crashed worker's sends are answered (1 s) long before its 5 s lease runs out.
        let small = try worker.start(environment: environment(fixture, concurrency: 16, lease: 60))
        while try await chunkOwners() == owners, ContinuousClock.now < deadline + .seconds(10) {
            try await Task.sleep(for: .milliseconds(20))
        }
        let acceptedBefore = Dictionary(uniqueKeysWithValues: tokens.map { ($0, fixture.emulator.stats(for: $0).accepted) })
        return (job, tokens, small, acceptedBefore)
    }

    /// Stopped, a worker sends what is in flight and hands its held-back devices to the next
    /// worker at once, not after its (here minute-long) lease.
    @Test func sigtermReleasesTheHeldBackDevicesOfATakenOverChunk() async throws {
        try await WorkerFixture.with { fixture in
            let (job, tokens, small, _) = try await takeOverWithDevicesHeldBack(fixture, prefix: "held-dev-")
            // Its first 16 sends go out as soon as it has read the job (their answers take 1 s).
            try await Task.sleep(for: .milliseconds(500))
            small.signal(SIGTERM)
            #expect(await small.exitStatus(within: .seconds(20)) == 0, "\(small.log)")
            let (sent, due) = try await fixture.sql { client in
                (
                    try await count(client, "SELECT count(*)::int FROM push_deliveries WHERE job_id = \(job) AND status = 'sent'"),
                    try await count(client, "SELECT count(*)::int FROM push_job_chunks WHERE lease_until <= now()")
                )
            }
            #expect(sent == 16 && due == 1, "sent \(sent), released chunks \(due): \(small.log)")

            let started = ContinuousClock.now
            let next = try worker.start(environment: environment(fixture, concurrency: 64, lease: 60))
            #expect(try await fixture.finished(job, within: .seconds(30)).status == "completed")
            #expect(ContinuousClock.now - started < .seconds(15), "taken over at once, not after the 60 s lease")
            next.signal(SIGTERM)
            _ = await next.exitStatus(within: .seconds(20))
            let rows = try await fixture.deliveries(job)
            #expect(rows.count == 64 && rows.values.allSatisfy { $0.status == "sent" })
            #expect(tokens.allSatisfy { fixture.emulator.stats(for: $0).accepted >= 1 })
        }
    }

    /// A job cancelled or failed while a worker holds back some devices of a chunk it took
    /// over: those are recorded as the job's ending says (the failure's reason included), with
    /// what the crashed worker that held them before may have done, and never sent again; what
    /// was in flight is recorded as sent.
    @Test(arguments: [JobDirectory.Ending.cancelled, .failed(reason: "app wowa: failed by the test")])
    func heldBackDevicesOfAnEndedJobAreRecordedNotSent(_ ending: JobDirectory.Ending) async throws {
        let (status, code, message) =
            switch ending {
            case .cancelled: ("skipped", "CANCELLED", "the job was cancelled; " + JobDirectory.heldByAStoppedWorker)
            case .failed(let reason): ("failed", "JOB_FAILED", reason + "; " + JobDirectory.heldByAStoppedWorker)
            }
        try await WorkerFixture.with { fixture in
            let (job, tokens, small, acceptedBefore) = try await takeOverWithDevicesHeldBack(fixture, prefix: "\(status)-dev-")
            let didEnd = try await fixture.sql { client in
                try await JobDirectory(client: client, logger: workerLogger).end(job, ending)
            }
            #expect(didEnd)
            let deadline = ContinuousClock.now + .seconds(20)
            while try await fixture.sql({ try await count($0, "SELECT count(*)::int FROM push_job_chunks") }) > 0,
                ContinuousClock.now < deadline
            {
                try await Task.sleep(for: .milliseconds(50))
            }
            small.signal(SIGTERM)
            #expect(await small.exitStatus(within: .seconds(20)) == 0, "\(small.log)")
            let rows = try await fixture.deliveries(job)
            let sent = tokens.filter { rows[$0]?.status == "sent" }
            let ended = tokens.filter { rows[$0].map { ($0.status, $0.errorCode, $0.errorMessage) == (status, code, message) } ?? false }
            #expect(
                rows.count == 64 && sent.count == 16 && ended.count == 48,
                "\(rows.values.map { [$0.status, $0.errorCode ?? "", $0.errorMessage ?? ""] })")
            #expect(sent.allSatisfy { fixture.emulator.stats(for: $0).accepted == acceptedBefore[$0]! + 1 })
            #expect(ended.allSatisfy { fixture.emulator.stats(for: $0).accepted == acceptedBefore[$0]! }, "a held-back device was sent")
        }
    }

    /// A fixture on a PostgreSQL cluster of the test's own, which it may stop, restart or freeze
    /// without touching the other tests' databases.
    func withClusterOfItsOwn(_ body: @Sendable (LocalCluster, WorkerFixture) async throws -> Void) async throws {
        let cluster = try LocalCluster.start()
        defer { cluster.stop() }
        try await TestPostgres.withClient(url: cluster.url()) { client in
            _ = try await client.query("CREATE DATABASE worker_test")
        }
        let database = TestDatabase(url: cluster.url(database: "worker_test"), name: "worker_test")
        _ = try await database.withClient { client in
            try await MigrationRunner.bundled().run(on: client, logger: workerLogger)
        }
        try await FCMEmulator.withRunning(.init(retainedMessageLimit: 10), logger: workerLogger) { emulator in
            let account = try ServiceAccountFixture.generate(projectID: "wowa-project")
            emulator.registerServiceAccount(account.serviceAccount)
            let appID = try await database.withClient { client in
                try await addApp(
                    client, code: "wowa", projectID: account.projectID, clientEmail: account.clientEmail,
                    privateKeyPEM: account.privateKeyPEM, privateKeyID: account.privateKeyID)
            }
            try await body(cluster, WorkerFixture(database: database, emulator: emulator, account: account, appID: appID))
        }
    }

    @Test func theWorkerRidesOutADatabaseRestart() async throws {
        try await ridesOut(devices: 300, prefix: "db-dev-", answersAfter: .milliseconds(50)) { cluster, _ in
            cluster.stop()
            try await Task.sleep(for: .seconds(2))
            try cluster.restart()
        }
    }

    /// The server ends the worker's sessions every 50 ms for 8 s, mid-campaign: statements then
    /// meet connections closing under them, where PostgresNIO alone left one unanswered for good
    /// (the worker silent, deaf to SIGTERM). The campaign still completes and the worker exits.
    @Test func theWorkerRidesOutItsSessionsBeingEnded() async throws {
        try await ridesOut(devices: 2000, prefix: "ended-dev-", answersAfter: .milliseconds(20)) { _, fixture in
            _ = try await fixture.database.endSessions(until: .now + .seconds(8))
        }
    }

    /// A campaign to `devices` devices through the real process, on a cluster of the test's own;
    /// `disruption` strikes once 30 are sent. The campaign still completes, every device gets its
    /// notification, and the worker exits 0 on SIGTERM.
    func ridesOut(
        devices: Int, prefix: String, answersAfter delay: Duration,
        disruption: @Sendable (LocalCluster, WorkerFixture) async throws -> Void
    ) async throws {
        try await withClusterOfItsOwn { cluster, fixture in
            let emulator = fixture.emulator
            emulator.script(tokenPrefix: prefix, .slow(delay))
            let tokens = try await seed(fixture, count: devices, prefix: prefix)
            let job = try await fixture.campaign()
            // The real process: its log explains a failure, and it can never hang the test run.
            let process = try worker.start(environment: environment(fixture, concurrency: 10))
            defer { process.signal(SIGKILL) }
            try await waitForSends(fixture, job, atLeast: 30)
            try await disruption(cluster, fixture)
            let status = try await fixture.finished(job, within: .seconds(90)).status
            #expect(status == "completed", "\(process.log.suffix(3000))")
            process.signal(SIGTERM)
            #expect(await process.exitStatus(within: .seconds(20)) == 0, "\(process.log.suffix(3000))")
            #expect(tokens.allSatisfy { emulator.stats(for: $0).accepted >= 1 })
        }
    }

    /// SIGTERM while FCM hangs (answers never come) and the database freezes (connections stay
    /// open, nothing answers, as on a hung host): the worker still exits within its drain bound,
    /// and what it could not record waits for its lease (another worker takes it over).
    @Test func sigtermEndsTheWorkerWithinItsDrainBoundWhateverFCMAndTheDatabaseDo() async throws {
        try await withClusterOfItsOwn { cluster, fixture in
            let emulator = fixture.emulator
            _ = try await seed(fixture, count: 400, prefix: "frozen-dev-")
            emulator.script(tokenPrefix: "frozen-dev-", .slow(.milliseconds(20)))
            let job = try await fixture.campaign()
            var environment = environment(fixture, concurrency: 20)
            environment["FCM_REQUEST_TIMEOUT_SECONDS"] = "2"
            var configuration = DispatchConfiguration(databaseURL: "")
            configuration.fcmRequestTimeout = .seconds(2)
            let bound = configuration.drainBound
            let process = try worker.start(environment: environment)
            defer { process.signal(SIGKILL) }
            try await waitForSends(fixture, job, atLeast: 40)
            // From now on FCM takes every request and never answers, and the database stops.
            emulator.script(tokenPrefix: "frozen-dev-", .slow(.seconds(600)))
            try await Task.sleep(for: .milliseconds(300))
            cluster.freeze()
            defer { cluster.thaw() }
            let signalled = ContinuousClock.now
            process.signal(SIGTERM)
            let status = await process.exitStatus(within: bound + .seconds(15))
            let took = ContinuousClock.now - signalled
            #expect(status != nil, "still running \(took) after SIGTERM (drain bound \(bound)): \(process.log.suffix(3000))")
            #expect(took < bound + .seconds(10), "took \(took) (drain bound \(bound))")
            #expect(process.log.contains("drain bound passed"), "\(process.log.suffix(3000))")
            // Past the bound a write fails by the worker's own cancellation: said once per
            // outbox, not as the database refusing statements, retried in a burst.
            #expect(!process.log.contains("database refused a statement"), "\(process.log.suffix(3000))")
            #expect(process.log.components(separatedBy: "giving up writing results").count - 1 <= 2, "\(process.log.suffix(3000))")
        }
    }

}
