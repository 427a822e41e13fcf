import AsyncHTTPClient
import DeviceRegistry
import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle
import Synchronization

/// The dispatch loop, as a service: expands job audiences, claims deliveries in batches sized
/// to free capacity, sends them concurrently (at most `concurrency` in flight), and writes the
/// results back in batches. Woken by NOTIFY on `push_jobs`, polling as a fallback. On graceful
/// shutdown it stops claiming, lets in-flight sends finish and records them.
public struct Dispatcher: Service {
    let configuration: DispatchConfiguration
    let queue: DeliveryQueue
    let tokens: AccessTokenCache
    let fcm: FCMClient
    let metrics: DispatchMetrics
    let logger: Logger
    let wake = WakeSignal()
    let inFlight = InFlightDeliveries()

    public init(configuration: DispatchConfiguration, client: PostgresClient, http: HTTPClient, metrics: DispatchMetrics, logger: Logger) {
        self.configuration = configuration
        self.queue = DeliveryQueue(client: client, worker: configuration.workerName, lease: configuration.lease, logger: logger)
        self.tokens = AccessTokenCache(
            exchange: GoogleTokenExchange(http: http, tokenURL: configuration.googleTokenURL, timeout: configuration.requestTimeout),
            onRefresh: { metrics.oauthRefreshes.increment() })
        self.fcm = FCMClient(http: http, baseURL: configuration.fcmBaseURL, timeout: configuration.requestTimeout)
        self.metrics = metrics
        self.logger = logger
    }

    public func run() async throws {
        await withGracefulShutdownHandler {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await listenForJobs() }
                group.addTask { await heartbeat() }
                group.addTask { await measureQueue() }
                await dispatchLoop()
                group.cancelAll()
            }
        } onGracefulShutdown: {
            wake.signal()
        }
    }

    // MARK: The loop

    private struct Attempt: Sendable {
        let claimed: DeliveryQueue.Claimed
        let job: DeliveryQueue.Job
        let result: Result<SendOutcome, AccessTokenError>
        let duration: Duration
    }

    /// State owned by the loop alone.
    private struct LoopState {
        var jobs: [Int64: (job: DeliveryQueue.Job, loaded: ContinuousClock.Instant)] = [:]
        var pausedApps: [Int64: ContinuousClock.Instant] = [:]
        var failedJobs: Set<Int64> = []
        var results: [DeliveryQueue.Result] = []
        var deactivations: [(deviceID: Int64, reason: String)] = []
        var touchedJobs: Set<Int64> = []
        var oldestUnflushed: ContinuousClock.Instant?
        var pendingJobFailures: [(job: Int64, reason: String)] = []
        var policy: DeliveryPolicy
        var databaseFailures = 0
    }

    private var stopping: Bool { Task.isShuttingDownGracefully || Task.isCancelled }

    private func dispatchLoop() async {
        var state = LoopState(policy: DeliveryPolicy(maxAttempts: configuration.maxAttempts))
        var running = 0
        await withTaskGroup(of: Attempt.self) { group in
            while true {
                if stopping && running == 0 { break }
                var progressed = false
                if !stopping {
                    let free = configuration.concurrency - running
                    if free >= max(1, configuration.concurrency / 4) || running == 0 {
                        do {
                            let batch = try await claimBatch(limit: free, state: &state)
                            for (claimed, job, account) in batch {
                                running += 1
                                inFlight.insert(claimed.deliveryID)
                                group.addTask { await Self.attempt(claimed, job, account, tokens: tokens, fcm: fcm) }
                            }
                            progressed = !batch.isEmpty
                            if batch.count < free, try await expandAudience(state: &state) { progressed = true }
                            state.databaseFailures = 0
                        } catch {
                            await databaseTrouble(error, state: &state)
                        }
                    }
                }
                if running > 0, let attempt = await group.next() {
                    running -= 1
                    inFlight.remove(attempt.claimed.deliveryID)
                    settle(attempt, state: &state)
                    progressed = true
                }
                if shouldFlush(state, idle: running == 0) { await flush(&state) }
                if !progressed && running == 0 && !stopping {
                    await wake.wait(upTo: configuration.pollInterval)
                }
            }
            await flush(&state)
        }
        logger.info("dispatcher stopped")
    }

    /// Claims what fits; deliveries that need no send (inactive device, job without
    /// credentials) are settled here and never reach FCM.
    private func claimBatch(limit: Int, state: inout LoopState) async throws -> [(DeliveryQueue.Claimed, DeliveryQueue.Job, ServiceAccount)] {
        let now = ContinuousClock.now
        state.pausedApps = state.pausedApps.filter { $0.value > now }
        let claimed = try await queue.claim(limit: limit, excludingApps: Array(state.pausedApps.keys))
        guard !claimed.isEmpty else { return [] }
        // New credentials in `apps` take effect within seconds, without a restart.
        let stale = Set(claimed.map(\.jobID)).filter { state.jobs[$0].map { now - $0.loaded > .seconds(5) } ?? true }
        if !stale.isEmpty {
            for job in try await queue.jobs(Array(stale)) { state.jobs[job.id] = (job, now) }
        }
        var batch: [(DeliveryQueue.Claimed, DeliveryQueue.Job, ServiceAccount)] = []
        for delivery in claimed {
            guard let job = state.jobs[delivery.jobID]?.job else { continue }
            if !delivery.deviceActive {
                record(.init(deliveryID: delivery.deliveryID, status: "skipped", errorCode: "DEVICE_INACTIVE",
                             errorMessage: "the device was deactivated before its turn", messageID: nil, attempted: false,
                             nextAttempt: Date()), job: job.id, state: &state)
                continue
            }
            guard let account = job.account else {
                let reason = "app \(job.appCode): no FCM credentials (pushctl app set-credentials --code \(job.appCode))"
                record(.init(deliveryID: delivery.deliveryID, status: "failed", errorCode: "NO_CREDENTIALS", errorMessage: reason,
                             messageID: nil, attempted: false, nextAttempt: Date()), job: job.id, state: &state)
                failJob(job.id, reason, state: &state)
                continue
            }
            batch.append((delivery, job, account))
        }
        return batch
    }

    private func expandAudience(state: inout LoopState) async throws -> Bool {
        guard let expanded = try await queue.expandNextAudience(chunk: configuration.audienceChunk) else { return false }
        logger.debug("audience expanded", metadata: ["push.job_id": "\(expanded.job)", "push.added": "\(expanded.added)"])
        if expanded.complete { state.touchedJobs.insert(expanded.job) }
        return true
    }

    private static func attempt(_ claimed: DeliveryQueue.Claimed, _ job: DeliveryQueue.Job, _ account: ServiceAccount,
                                tokens: AccessTokenCache, fcm: FCMClient) async -> Attempt {
        let start = ContinuousClock.now
        do {
            let token = try await tokens.token(for: account)
            var outcome = await fcm.send(job.message, to: claimed.token, type: claimed.tokenType, projectID: account.projectID, accessToken: token)
            if outcome == .unauthenticated {
                // Expired or revoked: one refresh, one retry.
                await tokens.invalidate(token, for: account)
                let fresh = try await tokens.token(for: account)
                outcome = await fcm.send(job.message, to: claimed.token, type: claimed.tokenType, projectID: account.projectID, accessToken: fresh)
            }
            return Attempt(claimed: claimed, job: job, result: .success(outcome), duration: ContinuousClock.now - start)
        } catch let error as AccessTokenError {
            return Attempt(claimed: claimed, job: job, result: .failure(error), duration: ContinuousClock.now - start)
        } catch {
            return Attempt(claimed: claimed, job: job, result: .failure(.transient("\(error)")), duration: ContinuousClock.now - start)
        }
    }

    private func settle(_ attempt: Attempt, state: inout LoopState) {
        let job = attempt.job
        let outcome: SendOutcome
        switch attempt.result {
        case .success(let sent):
            outcome = sent
            metrics.fcmLatency.record(attempt.duration)
        case .failure(let error) where error.isPermanent:
            let reason = "app \(job.appCode): \(error)"
            record(.init(deliveryID: attempt.claimed.deliveryID, status: "failed", errorCode: "OAUTH", errorMessage: reason,
                         messageID: nil, attempted: false, nextAttempt: Date()), job: job.id, state: &state)
            metrics.countSend(app: job.appCode, outcome: "oauth_refused")
            if state.failedJobs.insert(job.id).inserted { state.pendingJobFailures.append((job.id, reason)) }
            return
        case .failure(let error):
            outcome = .transient(errorCode: "OAUTH_UNAVAILABLE", message: error.description, retryAfter: nil, quota: false)
        }
        let decision = state.policy.decide(outcome, for: attempt.claimed, job: job)
        record(decision.result, job: job.id, state: &state)
        if let deactivate = decision.deactivate {
            state.deactivations.append(deactivate)
            logger.info("device deactivated", metadata: [
                "push.app": "\(job.appCode)", "push.device_id": "\(deactivate.deviceID)", "push.reason": "\(deactivate.reason)",
                "push.token": "\(maskedToken(attempt.claimed.token))",
            ])
        }
        if let pause = decision.pauseApp {
            state.pausedApps[job.appID] = ContinuousClock.now + pause
            logger.warning("FCM quota exceeded, slowing the app down", metadata: ["push.app": "\(job.appCode)", "push.pause": "\(pause)"])
        }
        if let reason = decision.failJob, state.failedJobs.insert(job.id).inserted {
            state.pendingJobFailures.append((job.id, reason))
        }
        metrics.countSend(app: job.appCode, outcome: decision.result.status == "pending" ? "retry" : (decision.result.errorCode ?? decision.result.status))
    }

    private func record(_ result: DeliveryQueue.Result, job: Int64, state: inout LoopState) {
        state.results.append(result)
        state.touchedJobs.insert(job)
        if state.oldestUnflushed == nil { state.oldestUnflushed = .now }
    }

    private func shouldFlush(_ state: LoopState, idle: Bool) -> Bool {
        guard let oldest = state.oldestUnflushed else { return !state.pendingJobFailures.isEmpty }
        return idle || state.results.count >= 512 || ContinuousClock.now - oldest > .milliseconds(100) || !state.pendingJobFailures.isEmpty
    }

    /// Writes buffered results in one batch; on a database error they stay buffered for the next try.
    private func flush(_ state: inout LoopState) async {
        do {
            try await queue.record(state.results, deactivate: state.deactivations)
            state.results.removeAll(keepingCapacity: true)
            state.deactivations.removeAll(keepingCapacity: true)
            state.oldestUnflushed = nil
            for (job, reason) in state.pendingJobFailures {
                try await queue.fail(job: job, error: reason)
                logger.error("job failed", metadata: ["push.job_id": "\(job)", "push.error": "\(reason)"])
            }
            state.pendingJobFailures.removeAll()
            try await queue.completeFinished(Array(state.touchedJobs))
            state.touchedJobs.removeAll(keepingCapacity: true)
        } catch {
            await databaseTrouble(error, state: &state)
        }
    }

    private func failJob(_ job: Int64, _ reason: String, state: inout LoopState) {
        guard state.failedJobs.insert(job).inserted else { return }
        state.pendingJobFailures.append((job, reason))
    }

    /// The database went away: keep what is buffered, back off, try again.
    private func databaseTrouble(_ error: any Error, state: inout LoopState) async {
        state.databaseFailures += 1
        let delay = min(Double(1 << min(state.databaseFailures, 5)) * 0.25, 5)
        logger.warning("database unavailable, retrying", metadata: ["push.error": "\(DatabaseErrorText.describe(error))", "push.retry_in_s": "\(delay)"])
        try? await Task.sleep(for: .milliseconds(Int(delay * 1000)))
    }

    // MARK: Companions

    /// NOTIFY push_jobs wakes the loop at once; reconnects when the database comes back.
    private func listenForJobs() async {
        while !Task.isCancelled {
            do {
                try await queue.client.withConnection { connection in
                    try await connection.listen(on: "push_jobs") { notifications in
                        for try await _ in notifications { wake.signal() }
                    }
                }
            } catch {
                if Task.isCancelled { return }
                logger.debug("LISTEN connection lost", metadata: ["push.error": "\(error)"])
            }
            try? await Task.sleep(for: .seconds(1))
        }
    }

    /// Extends the leases of in-flight deliveries every third of the lease.
    private func heartbeat() async {
        while !Task.isCancelled {
            try? await Task.sleep(for: configuration.lease / 3)
            let ids = inFlight.all()
            do {
                try await queue.heartbeat(ids)
            } catch {
                logger.warning("lease heartbeat failed", metadata: ["push.error": "\(DatabaseErrorText.describe(error))"])
            }
        }
    }

    private func measureQueue() async {
        while !Task.isCancelled {
            if let (pending, age) = try? await queue.depth() {
                metrics.queueDepth.set(Double(pending))
                metrics.oldestDueJobAge.set(age)
            }
            try? await Task.sleep(for: .seconds(5))
        }
    }
}

/// Deliveries whose sends are in flight, shared by the loop and the heartbeat.
final class InFlightDeliveries: Sendable {
    private let ids = Mutex<Set<Int64>>([])
    func insert(_ id: Int64) { ids.withLock { _ = $0.insert(id) } }
    func remove(_ id: Int64) { ids.withLock { _ = $0.remove(id) } }
    func all() -> [Int64] { ids.withLock { Array($0) } }
}
