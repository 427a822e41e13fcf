import DeviceRegistry
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import PushAPI
import TestSupport
import Testing

@Suite("Database outage")
struct OutageTests {
    /// The database goes away and comes back on the same port: 503 with the envelope and a
    /// failing /readyz meanwhile, then service resumes without a restart.
    @Test(.timeLimit(.minutes(2)))
    func answers503WhileTheDatabaseIsDownAndRecoversByItself() async throws {
        let port = try LocalCluster.freePort()
        let url = "postgres://postgres@127.0.0.1:\(port)/postgres?sslmode=disable"
        let configuration = APIConfiguration(
            databaseURL: url, port: 0, jwt: .init(hmacSecret: TokenMint.secret), databaseDeadline: .seconds(2))
        let app = try await buildApplication(configuration, logger: apiLogger)
        let token = TokenMint.sign(TokenMint.claims(appID: 1))
        try await app.test(.router) { client in
            let t0 = ContinuousClock.now
            let down = try await client.register(token: "outage-tok", as: token)
            #expect(ContinuousClock.now - t0 < .seconds(4))
            #expect(down.status == .serviceUnavailable)
            #expect(down.json["code"] as? String == "DATABASE_UNAVAILABLE")
            #expect(down.json["status"] as? String == "SERVICE_UNAVAILABLE")
            #expect(try await client.execute(uri: "/readyz", method: .get).status == .serviceUnavailable)
            #expect(try await client.execute(uri: "/healthz", method: .get).status == .ok)

            let cluster = try LocalCluster.start(port: port)
            defer { cluster.stop() }
            try await TestPostgres.withClient(url: url) { client in
                try await MigrationRunner.bundled().run(on: client, logger: apiLogger)
                _ = try await AppDirectory(client: client, logger: apiLogger).add(code: "wowa", name: "Wowa", serviceAccount: nil)
            }
            var recovered = false
            let start = ContinuousClock.now
            for _ in 0..<60 where !recovered {
                recovered = try await client.execute(uri: "/readyz", method: .get).status == .ok
                if !recovered { try await Task.sleep(for: .milliseconds(500)) }
            }
            #expect(recovered, "not ready \(ContinuousClock.now - start) after the database came back")
            #expect(try await client.register(token: "outage-tok", as: token).status == .created)

            // And down again mid-flight: still the envelope, never a hang or a 500.
            cluster.stop()
            let again = try await client.register(token: "outage-tok", as: token)
            #expect(again.status == .serviceUnavailable)
        }
    }

    /// An enqueue stuck behind a lock (a migration, a long maintenance statement) is given up by
    /// the database at push-api's deadline: the client gets its 503 then, and nothing is queued
    /// when the lock goes, so its retry cannot make a second job. Before, the 503 came only once
    /// the lock went, for a job the database had committed.
    @Test(.timeLimit(.minutes(2)))
    func anEnqueueStuckBehindALockIsAbandonedByTheDatabaseAndQueuesNothing() async throws {
        let fixture = try await APIFixture.make()
        let configuration = APIConfiguration(
            databaseURL: fixture.database.url, host: "127.0.0.1", port: 0, jwt: .init(hmacSecret: TokenMint.secret),
            databaseDeadline: .seconds(1), adminToken: AdminEndpointTests.token)
        let app = try await buildApplication(configuration, logger: apiLogger)
        let (answer, took) = try await fixture.database.withClient { locker in
            try await withThrowingTaskGroup(of: (TestResponse, Duration)?.self) { group in
                let locked = AsyncStream.makeStream(of: Void.self)
                group.addTask {
                    try await locker.withTransaction(logger: apiLogger) { transaction in
                        _ = try await transaction.query("LOCK TABLE push_jobs IN ACCESS EXCLUSIVE MODE", logger: apiLogger)
                        locked.continuation.yield()
                        try await Task.sleep(for: .seconds(4))
                    }
                    return nil
                }
                for await _ in locked.stream { break }
                let answer = try await app.test(.router) { client in
                    let start = ContinuousClock.now
                    let answer = try await client.admin(
                        .post, "/push/notifications", json: #"{"appCode":"wowa","userIds":[1],"message":{"notification":{"title":"t"}}}"#)
                    return (answer, ContinuousClock.now - start)
                }
                try await group.waitForAll()
                return answer
            }
        }
        #expect(answer.status == .serviceUnavailable)
        #expect(answer.json["code"] as? String == "DATABASE_UNAVAILABLE")
        #expect(took < .seconds(3), "answered after \(took)")
        #expect(try await fixture.database.text("SELECT count(*)::text FROM push_jobs") == "0")
    }

    /// push-api's database sessions are ended every 50 ms for 5 s (pg_terminate_backend, as a
    /// failover or an operator would) while clients register devices, list them, read the admin
    /// job list and ask /readyz, each on a connection of its own: every request is answered within
    /// 10 s, with its success or a 503; once its sessions are left alone every kind succeeds again,
    /// and SIGTERM ends push-api at once. PostgresNIO alone can hand a statement to a connection
    /// that has just closed and never answer it (see DatabaseStatement): such a request hung, or
    /// its caller was answered 503 at the deadline while the statement held its pooled connection
    /// and push-api's graceful shutdown for good.
    @Test(.timeLimit(.minutes(2)))
    func everyRequestIsAnsweredWhilePushAPIsSessionsAreBeingEnded() async throws {
        let fixture = try await APIFixture.make()
        let server = try await PushAPIProcess.start(
            database: fixture.database.url, environment: ["PUSH_ADMIN_TOKEN": ChurnRequest.adminToken])
        // Hummingbird logs every 5xx answer at error level; the 503s are the answers expected.
        let expected503: (Substring) -> Bool = { $0.contains(" http.status=503 ") && $0.hasSuffix(" request") }
        try await server.whileRunning(tolerating: expected503) {
            for kind in ChurnRequest.allCases {
                let answer = await kind.send(port: server.port, fixture: fixture, user: 1)
                #expect(answer.succeeded, "before the sessions are ended: \(answer)")
            }
            let churnEnds = ContinuousClock.now + .seconds(5)
            async let ended = fixture.database.endSessions(until: churnEnds)
            let answers = await withTaskGroup(of: [ChurnAnswer].self) { group in
                for lane in 0..<6 {
                    group.addTask {
                        var answers: [ChurnAnswer] = []
                        var sent = 0
                        while ContinuousClock.now < churnEnds {
                            let kind = ChurnRequest.allCases[(lane + sent) % ChurnRequest.allCases.count]
                            answers.append(await kind.send(port: server.port, fixture: fixture, user: Int64(1_000 + lane * 10_000 + sent)))
                            sent += 1
                        }
                        return answers
                    }
                }
                return await group.reduce(into: []) { $0 += $1 }
            }
            let sessionsEnded = try await ended
            #expect(sessionsEnded >= 20, "only \(sessionsEnded) of push-api's sessions were ended")
            #expect(answers.count >= 40, "only \(answers.count) requests were made")
            let unanswered = answers.filter { !$0.isSuccessOr503 }
            #expect(
                unanswered.isEmpty,
                "\(unanswered.count) of \(answers.count) requests not answered with success or 503: \(unanswered.prefix(10))")

            // Left alone, push-api's pool reconnects: every kind succeeds again.
            for kind in ChurnRequest.allCases {
                var attempt: Int64 = 900_000
                var answer = await kind.send(port: server.port, fixture: fixture, user: attempt)
                let until = ContinuousClock.now + .seconds(15)
                while !answer.succeeded && ContinuousClock.now < until {
                    try await Task.sleep(for: .milliseconds(200))
                    attempt += 1
                    answer = await kind.send(port: server.port, fixture: fixture, user: attempt)
                }
                #expect(answer.succeeded, "after the sessions were left alone: \(answer)")
            }
            // A statement never answered would also hold push-api's graceful shutdown for good.
            let exit = await server.terminate()
            #expect(
                exit == 0, "push-api \(exit.map { "exited \($0)" } ?? "was still running 10 s after SIGTERM"): \(server.log.suffix(3000))")
            let served = answers.filter(\.succeeded).count
            print(
                "sessions ended \(sessionsEnded) times in 5 s: \(answers.count) requests, \(served) served, \(answers.count - served) 503")
        }
    }
}

/// A request the session-ending test makes, each on a new connection, as a phone or an admin
/// script does.
private enum ChurnRequest: CaseIterable, CustomStringConvertible {
    case register, listDevices, listJobs, readiness

    static let adminToken = "churn-admin-token-0123456789abcdef"

    var description: String {
        switch self {
        case .register: "POST /push/devices"
        case .listDevices: "GET /push/devices"
        case .listJobs: "GET /admin/jobs"
        case .readiness: "GET /readyz"
        }
    }

    /// Sent as `user` (a registration, a device listing): users differ so that no per-user rate
    /// limit answers instead of the database.
    func send(port: Int, fixture: APIFixture, user: Int64) async -> ChurnAnswer {
        let start = ContinuousClock.now
        let userHeaders: HTTPFields = [.authorization: "Bearer \(fixture.token(user: user))", .contentType: "application/json"]
        do {
            let status = try await TestClient.withClient(host: "127.0.0.1", port: port, configuration: .init(timeout: .seconds(10))) {
                client in
                switch self {
                case .register:
                    let body = ByteBuffer(string: #"{"token":"churn-token-of-user-\#(user)","platform":"android"}"#)
                    return try await client.post("/push/devices", headers: userHeaders, body: body).status
                case .listDevices: return try await client.get("/push/devices", headers: userHeaders).status
                case .listJobs: return try await client.get("/admin/jobs", headers: [.authorization: "Bearer \(Self.adminToken)"]).status
                case .readiness: return try await client.get("/readyz").status
                }
            }
            return ChurnAnswer(request: self, outcome: .status(status), took: ContinuousClock.now - start)
        } catch {
            return ChurnAnswer(request: self, outcome: .failed("\(error)"), took: ContinuousClock.now - start)
        }
    }
}

private struct ChurnAnswer: Sendable, CustomStringConvertible {
    enum Outcome: Sendable {
        case status(HTTPResponse.Status)
        /// No answer: the client's 10 s timeout, or the connection closed without one.
        case failed(String)
    }

    let request: ChurnRequest
    let outcome: Outcome
    let took: Duration

    var succeeded: Bool {
        guard case .status(let status) = outcome else { return false }
        return request == .register ? status == .created || status == .ok : status == .ok
    }

    var isSuccessOr503: Bool {
        if case .status(.serviceUnavailable) = outcome { return true }
        return succeeded
    }

    var description: String {
        switch outcome {
        case .status(let status): "\(request): \(status.code) after \(took)"
        case .failed(let error): "\(request): no answer after \(took) (\(error))"
        }
    }
}
