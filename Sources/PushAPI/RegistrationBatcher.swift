import DeviceRegistry
import Logging
import NIOCore
import ServiceLifecycle
import ServiceSupport
import Synchronization

/// Registers devices for push-api's requests. A registration waits in a queue for one of
/// `lanes` statements (one per pooled connection); a free lane takes everything queued, up to
/// `maximumBatch`, and registers it in one statement (`DeviceDirectory.register(batch:)`).
///
/// Batches form only while every lane is busy, so a registration on a quiet server is one
/// statement of its own, as before, and waits for nothing. Under load, PostgreSQL spends most
/// of a registration's CPU on the statement and the commit around it; sharing them halves its
/// cost per registration. A batch fails as a whole; its registrations are then run one by one,
/// so each caller gets its own answer (a deadlock between two batches is retried there too).
///
/// A registration not answered within `deadline` (queued, or in a batch the database does not
/// finish) is answered with `DatabaseUnavailable` (503), by one sweep every twentieth of the
/// deadline: a timer per request cost every registration a task group and two child tasks. Each
/// statement has the same deadline (one timer per batch), so a lane stuck on a lost database
/// gives up, and a graceful shutdown does not wait for the database to come back.
///
/// Every registration passes here, so here the per-user bounds are kept: a registration over
/// the user's rate (`RegistrationRateLimiter`) is refused before it queues (429), and each
/// statement caps the user's active devices (`push_register_device`'s `p_max_active_devices`,
/// applied per registration inside a batch as alone).
///
/// Runs as a service after the PostgreSQL client's and before the server's, so at shutdown the
/// server's last requests still find it; it finishes what is queued, then returns.
final class RegistrationBatcher: Service, Sendable {
    typealias Registered = DeviceDirectory.Registered

    private struct Queued {
        let id: UInt64
        let registration: DeviceDirectory.Registration
        let logger: Logger
    }

    private struct Caller {
        let continuation: CheckedContinuation<Registered, any Error>
        let expires: ContinuousClock.Instant
    }

    private struct State {
        var queue = CircularBuffer<Queued>()
        /// Every caller still waiting, queued or in a running batch. Whoever removes one resumes
        /// it: the lane with the result, the deadline sweep, or the caller's cancellation handler.
        var callers: [UInt64: Caller] = [:]
        var idleLanes: [CheckedContinuation<Void, Never>] = []
        var closed = false
    }

    private let registry: DeviceDirectory
    private let lanes: Int
    private let maximumBatch: Int
    private let deadline: Duration
    private let limits: RegistrationLimits
    private let rateLimiter: RegistrationRateLimiter
    private let statementDeadline: DatabaseDeadline
    private let batchSizes: (@Sendable (Int) -> Void)?
    private let logger: Logger
    private let state = Mutex(State())
    private let lastID = Atomic<UInt64>(0)

    /// - Parameters:
    ///   - lanes: statements at once; more than the pool's connections would only queue there.
    ///   - deadline: the longest a caller waits for its answer.
    ///   - limits: the per-user bounds.
    ///   - batchSizes: told the size of every batch run (for metrics).
    init(
        registry: DeviceDirectory, lanes: Int, maximumBatch: Int = 32, deadline: Duration,
        limits: RegistrationLimits = RegistrationLimits(), logger: Logger, batchSizes: (@Sendable (Int) -> Void)? = nil
    ) {
        precondition(lanes > 0 && maximumBatch > 0 && deadline > .zero)
        self.registry = registry
        self.lanes = lanes
        self.maximumBatch = maximumBatch
        self.deadline = deadline
        self.limits = limits
        self.rateLimiter = RegistrationRateLimiter(perMinute: limits.registrationsPerUserPerMinute)
        self.statementDeadline = DatabaseDeadline(limit: deadline)
        self.logger = logger
        self.batchSizes = batchSizes
    }

    /// Registrations waiting for a lane.
    var waiting: Int {
        state.withLock { $0.queue.count }
    }

    /// False once a graceful shutdown began: registrations are refused (`APIError.shuttingDown`).
    var isAccepting: Bool {
        state.withLock { !$0.closed }
    }

    /// Registers one device, as `DeviceDirectory.register` does. Past the deadline, or when the
    /// caller's task is cancelled, the caller is answered at once (`DatabaseUnavailable`,
    /// `CancellationError`); if its batch already runs, the registration may still be committed
    /// (registering is idempotent, the client retries). Over the user's rate, refused at once
    /// (`APIError` 429 with the wait), and nothing is written.
    func register(_ registration: DeviceRegistration, userID: Int64, appID: Int64, logger: Logger) async throws -> Registered {
        if let wait = rateLimiter.admit(.init(appID: appID, userID: userID)) {
            throw APIError.tooManyRequests(
                "more than \(limits.registrationsPerUserPerMinute) registrations a minute for this user; retry later",
                retryAfter: wait)
        }
        let id = lastID.add(1, ordering: .relaxed).newValue
        let queued = Queued(id: id, registration: .init(registration, userID: userID, appID: appID), logger: logger)
        let expires = ContinuousClock.now + deadline
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (caller: CheckedContinuation<Registered, any Error>) in
                enum Admission {
                    case queued(CheckedContinuation<Void, Never>?)
                    case refused(any Error)
                }
                let admission = state.withLock { state -> Admission in
                    // Checked under the lock the cancellation handler takes: a cancellation either
                    // finds the registration queued or stops it here.
                    if Task.isCancelled { return .refused(CancellationError()) }
                    if state.closed { return .refused(APIError.shuttingDown) }
                    state.queue.append(queued)
                    state.callers[id] = Caller(continuation: caller, expires: expires)
                    return .queued(state.idleLanes.popLast())
                }
                switch admission {
                case .queued(let lane): lane?.resume()
                case .refused(let error): caller.resume(throwing: error)
                }
            }
        } onCancel: {
            let caller = state.withLock { state in
                state.queue.removeAll { $0.id == id }
                return state.callers.removeValue(forKey: id)
            }
            caller?.continuation.resume(throwing: CancellationError())
        }
    }

    func run() async throws {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.answerOverdueCallers() }
            group.addTask {
                // The server stops before this service is told to, so nothing new arrives after
                // this; cancellation (no graceful shutdown) closes it the same way.
                try? await gracefulShutdown()
                self.close()
            }
            await withDiscardingTaskGroup { lanes in
                for _ in 0..<self.lanes {
                    lanes.addTask { await self.runLane() }
                }
            }
            // The lanes return once closed and drained: nobody is left waiting.
            group.cancelAll()
        }
    }

    /// Answers every caller past its deadline, until cancelled.
    private func answerOverdueCallers() async {
        let sweep = min(max(deadline / 20, .milliseconds(10)), .milliseconds(250))
        while (try? await Task.sleep(for: sweep)) != nil {
            let now = ContinuousClock.now
            let overdue = state.withLock { state in
                let ids = state.callers.filter { $0.value.expires <= now }.keys
                guard !ids.isEmpty else { return [Caller]() }
                state.queue.removeAll { ids.contains($0.id) }
                return ids.compactMap { state.callers.removeValue(forKey: $0) }
            }
            for caller in overdue { caller.continuation.resume(throwing: DatabaseUnavailable(waited: deadline)) }
        }
    }

    private func close() {
        let idle = state.withLock { state in
            state.closed = true
            defer { state.idleLanes = [] }
            return state.idleLanes
        }
        for lane in idle { lane.resume() }
    }

    private func runLane() async {
        while let batch = await nextBatch() {
            batchSizes?(batch.count)
            await register(batch)
        }
    }

    /// Waits for queued registrations; nil once closed and drained.
    private func nextBatch() async -> [Queued]? {
        while true {
            enum Next {
                case batch([Queued])
                case finished, wait
            }
            let next = state.withLock { state -> Next in
                if state.queue.isEmpty { return state.closed ? .finished : .wait }
                let count = min(state.queue.count, maximumBatch)
                let batch = Array(state.queue.prefix(count))
                state.queue.removeFirst(count)
                return .batch(batch)
            }
            switch next {
            case .batch(let batch): return batch
            case .finished: return nil
            case .wait:
                await withCheckedContinuation { (lane: CheckedContinuation<Void, Never>) in
                    let wakeNow = state.withLock { state in
                        if state.queue.isEmpty && !state.closed {
                            state.idleLanes.append(lane)
                            return false
                        }
                        return true
                    }
                    if wakeNow { lane.resume() }
                }
            }
        }
    }

    private func register(_ batch: [Queued]) async {
        let registry = self.registry
        if batch.count > 1 {
            do {
                let (registrations, logger) = (batch.map(\.registration), self.logger)
                let maximumActiveDevices = limits.maximumActiveDevicesPerUser
                let registered = try await statementDeadline.run {
                    try await registry.register(batch: registrations, maximumActiveDevices: maximumActiveDevices, logger: logger)
                }
                for (queued, result) in zip(batch, registered) { answer(queued, with: .success(result)) }
                return
            } catch  where DatabaseErrorText.isServerError(error) {
                logger.debug(
                    "registration batch failed, registering one by one",
                    metadata: [
                        "push.batch_size": "\(batch.count)", "push.error": "\(DatabaseErrorText.describe(error))",
                    ])
            } catch {
                // The connection, not a registration: one by one would fail the same way, slowly.
                for queued in batch { answer(queued, with: .failure(error)) }
                return
            }
        }
        for queued in batch where isWaiting(queued) {
            let (registration, logger, maximumActiveDevices) = (queued.registration, queued.logger, limits.maximumActiveDevicesPerUser)
            do {
                let registered = try await statementDeadline.run {
                    try await registry.register(
                        registration.device, userID: registration.userID, appID: registration.appID,
                        maximumActiveDevices: maximumActiveDevices, logger: logger)
                }
                answer(queued, with: .success(registered))
            } catch {
                answer(queued, with: .failure(error))
            }
        }
    }

    private func isWaiting(_ queued: Queued) -> Bool {
        state.withLock { $0.callers[queued.id] != nil }
    }

    private func answer(_ queued: Queued, with result: Result<Registered, any Error>) {
        state.withLock { $0.callers.removeValue(forKey: queued.id) }?.continuation.resume(with: result)
    }
}
