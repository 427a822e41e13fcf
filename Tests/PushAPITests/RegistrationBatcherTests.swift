import DeviceRegistry
import Logging
import PostgresNIO
import ServiceLifecycle
import ServiceSupport
import Synchronization
import TestSupport
import Testing

@testable import PushAPI

/// The batcher against PostgreSQL. Each test holds its single lane on a registration that waits
/// for a token lock the test holds, so what queues behind it, and therefore each batch, is known.
@Suite("RegistrationBatcher against PostgreSQL")
struct RegistrationBatcherTests {
    @Test func whatQueuesWhileTheLaneIsBusyIsRegisteredInOneStatement() async throws {
        try await withBlockedLane { lane in
            let answers = try await withThrowingTaskGroup(of: DeviceDirectory.Registered.self) { group in
                for user in Int64(1)...3 {
                    group.addTask { try await lane.register("tok-\(user)", user: user) }
                }
                try await lane.waitUntilQueued(3)
                lane.release()
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(answers.count == 3)
            for answer in answers {
                #expect(answer.created && answer.device.token == "tok-\(answer.device.userID)")
            }
            #expect(lane.batchSizes() == [1, 3])
        }
    }

    /// One registration the database refuses fails its batch; the batch is then run one by one,
    /// so the others succeed and only that caller sees the error.
    @Test func aFailedBatchIsRetriedOneByOneAndOnlyTheBadRegistrationFails() async throws {
        try await withBlockedLane { lane in
            let outcomes = try await withThrowingTaskGroup(of: (String, String?).self) { group in
                for (token, app) in [("tok-good-1", lane.app), ("tok-no-app", lane.app + 1000), ("tok-good-2", lane.app)] {
                    group.addTask {
                        do {
                            _ = try await lane.register(token, user: 5, app: app)
                            return (token, nil)
                        } catch {
                            return (token, DatabaseErrorText.sqlState(error)?.raw ?? "\(error)")
                        }
                    }
                }
                try await lane.waitUntilQueued(3)
                lane.release()
                return try await group.reduce(into: [String: String?]()) { $0[$1.0] = $1.1 }
            }
            #expect(outcomes["tok-good-1"] == .some(nil) && outcomes["tok-good-2"] == .some(nil))
            #expect(outcomes["tok-no-app"] == .some(PostgresError.Code.foreignKeyViolation.raw))
            #expect(lane.batchSizes() == [1, 3])
            #expect(try await lane.tokens() == ["tok-blocker", "tok-good-1", "tok-good-2"])
        }
    }

    /// The cap holds inside a batch, each registration counted in arrival order; a registration
    /// over the user's rate is refused before it queues.
    @Test func aBatchKeepsTheCapAndTheRateIsCheckedBeforeQueueing() async throws {
        let limits = RegistrationLimits(maximumActiveDevicesPerUser: 2, registrationsPerUserPerMinute: 3)
        try await withBlockedLane(limits: limits) { lane in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (index, token) in ["tok-first", "tok-second", "tok-third"].enumerated() {
                    group.addTask { _ = try await lane.register(token, user: 5) }
                    try await lane.waitUntilQueued(index + 1)
                }
                await #expect {
                    _ = try await lane.register("tok-over-the-rate", user: 5)
                } throws: { ($0 as? APIError)?.status == .tooManyRequests && ($0 as? APIError)?.retryAfterSeconds == 20 }
                #expect(lane.batcher.waiting == 3)
                lane.release()
                try await group.waitForAll()
            }
            #expect(lane.batchSizes() == [1, 3])
            #expect(try await count(lane.client, "SELECT count(*)::int FROM push_devices WHERE user_id = 5 AND is_active") == 2)
            #expect(
                try await count(
                    lane.client,
                    """
                    SELECT count(*)::int FROM push_devices WHERE token = 'tok-first' AND deactivation_reason = 'device_limit'
                    """) == 1)
            #expect(try await lane.tokens() == ["tok-blocker", "tok-first", "tok-second", "tok-third"])
        }
    }

    /// A caller that gives up (its request's deadline) is answered at once and its queued
    /// registration never runs.
    @Test func aCancelledRegistrationLeavesTheQueueAndIsNeverWritten() async throws {
        try await withBlockedLane { lane in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { _ = try await lane.register("tok-kept", user: 1) }
                try await lane.waitUntilQueued(1)
                let cancelled = Task { try await lane.register("tok-cancelled", user: 2) }
                try await lane.waitUntilQueued(2)
                cancelled.cancel()
                await #expect(throws: CancellationError.self) { _ = try await cancelled.value }
                #expect(lane.batcher.waiting == 1)
                lane.release()
                try await group.waitForAll()
            }
            #expect(try await lane.tokens() == ["tok-blocker", "tok-kept"])
            #expect(lane.batchSizes() == [1, 1])
        }
    }

    /// Past the deadline a caller is answered with 503's error, whether its registration is
    /// queued (it is then never written) or in a batch the database does not finish.
    @Test func callersPastTheDeadlineAreAnsweredWhereverTheyWait() async throws {
        try await withBlockedLane(runsAsService: false, deadline: .milliseconds(500)) { lane in
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await lane.batcher.run() }
                let started = ContinuousClock.now
                async let blocked = outcome { try await lane.register("tok-blocker", user: 1) }
                try await lane.waitUntilBlocked()
                async let queued = outcome { try await lane.register("tok-queued", user: 2) }
                for outcome in [await blocked, await queued] {
                    #expect(throws: DatabaseUnavailable.self) { try outcome.get() }
                }
                #expect(ContinuousClock.now - started < .seconds(2))
                #expect(lane.batcher.waiting == 0)
                lane.release()
                // The blocked batch still commits once the lock is free; the queued one never ran.
                try await lane.waitUntil { try await lane.tokens() == ["tok-blocker"] }
                #expect(lane.batchSizes() == [1])
                group.cancelAll()
            }
        }
    }

    /// At a graceful shutdown the batcher finishes what is queued and refuses what comes later.
    @Test func aGracefulShutdownFinishesTheQueueAndRefusesNewRegistrations() async throws {
        try await withBlockedLane(runsAsService: false) { lane in
            let services = ServiceGroup(configuration: .init(services: [lane.batcher], logger: apiLogger))
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await services.run() }
                group.addTask { _ = try await lane.register("tok-blocker", user: 1) }
                try await lane.waitUntilBlocked()
                group.addTask { _ = try await lane.register("tok-queued", user: 2) }
                try await lane.waitUntilQueued(1)
                await services.triggerGracefulShutdown()
                try await lane.waitUntil { !lane.batcher.isAccepting }
                await #expect(throws: APIError.shuttingDown) { _ = try await lane.register("tok-late", user: 3) }
                lane.release()
                try await group.waitForAll()
            }
            #expect(try await lane.tokens() == ["tok-blocker", "tok-queued"])
        }
    }
}

/// A batcher with one lane, on a fresh database with one app, and a transaction holding the
/// token lock of `tok-blocker` until `release()`.
private struct BlockedLane: Sendable {
    let client: PostgresClient
    let batcher: RegistrationBatcher
    let app: Int64
    let sizes: BatchSizes
    let unlock: AsyncStream<Void>.Continuation

    func register(_ token: String, user: Int64, app: Int64? = nil) async throws -> DeviceDirectory.Registered {
        try await batcher.register(
            try DeviceRegistration(token: token, platform: "ios", deviceID: nil, tokenType: nil),
            userID: user, appID: app ?? self.app, logger: apiLogger)
    }

    func release() {
        unlock.yield()
        unlock.finish()
    }

    func batchSizes() -> [Int] { sizes.all }

    func tokens() async throws -> [String] {
        var tokens: [String] = []
        for try await token in try await client.query("SELECT token FROM push_devices ORDER BY token").decode(String.self) {
            tokens.append(token)
        }
        return tokens
    }

    /// The lane's registration waits for the test's lock.
    func waitUntilBlocked() async throws {
        try await waitUntil {
            try await count(client, "SELECT count(*)::int FROM pg_locks WHERE locktype = 'advisory' AND NOT granted") == 1
        }
    }

    func waitUntilQueued(_ count: Int) async throws {
        try await waitUntil { batcher.waiting == count }
    }

    func waitUntil(_ condition: () async throws -> Bool) async throws {
        for _ in 0..<500 {
            if try await condition() { return }
            try await Task.sleep(for: .milliseconds(10))
        }
        Issue.record("condition not met within 5 s")
        throw CancellationError()
    }
}

/// The size of every batch the batcher ran, in order.
private final class BatchSizes: Sendable {
    private let sizes = Mutex<[Int]>([])
    var all: [Int] { sizes.withLock { $0 } }
    func append(_ size: Int) { sizes.withLock { $0.append(size) } }
}

/// Runs `body` with a lane whose first registration (`tok-blocker`, user 1) is blocked; unless
/// `runsAsService` is false, the batcher runs and the blocked registration is already waiting.
private func withBlockedLane(
    runsAsService: Bool = true, deadline: Duration = .seconds(30),
    limits: RegistrationLimits = RegistrationLimits(),
    _ body: @Sendable (BlockedLane) async throws -> Void
) async throws {
    try await TestPostgres.shared.makeDatabase().withClient { client in
        let app = try await AppDirectory(client: client, logger: apiLogger).add(code: "wowa", name: "Wowa", serviceAccount: nil).id
        let sizes = BatchSizes()
        let batcher = RegistrationBatcher(
            registry: DeviceDirectory(client: client), lanes: 1, deadline: deadline, limits: limits,
            logger: apiLogger, batchSizes: { sizes.append($0) })
        let (unlocked, unlock) = AsyncStream<Void>.makeStream()
        let lane = BlockedLane(client: client, batcher: batcher, app: app, sizes: sizes, unlock: unlock)
        try await withThrowingTaskGroup(of: Void.self) { group in
            // The lock the blocker's registration waits for, held in a transaction of its own.
            group.addTask {
                try await client.withConnection { connection in
                    _ = try await connection.query("BEGIN", logger: apiLogger)
                    _ = try await connection.query(
                        "SELECT pg_advisory_xact_lock(hashtextextended('push_devices:token:' || \(app)::bigint || ':tok-blocker', 0))",
                        logger: apiLogger)
                    for await _ in unlocked {}
                    _ = try await connection.query("COMMIT", logger: apiLogger)
                }
            }
            try await lane.waitUntil {
                try await count(client, "SELECT count(*)::int FROM pg_locks WHERE locktype = 'advisory' AND granted") == 1
            }
            if runsAsService {
                group.addTask { try await batcher.run() }
                group.addTask { _ = try await lane.register("tok-blocker", user: 1) }
                try await lane.waitUntilBlocked()
                try await body(lane)
                group.cancelAll()
            } else {
                try await body(lane)
            }
            try await group.waitForAll()
        }
    }
}

private func outcome<T: Sendable>(_ body: () async throws -> T) async -> Result<T, any Error> {
    do {
        return .success(try await body())
    } catch {
        return .failure(error)
    }
}
