import AsyncHTTPClient
import DeviceRegistry
import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle
import Synchronization

/// The dispatch loop, as a service: claims deliveries in batches sized to free capacity (due
/// ones first, then the next devices of due jobs' audiences), sends them concurrently (at most
/// `concurrency` in flight), settles each answer as it comes (a slow one holds back nothing but
/// its own slot), and writes the results back in batches. Woken by NOTIFY on `push_jobs`,
/// polling as a fallback; stops sending while FCM cannot be reached (FCMReachability). On
/// graceful shutdown it stops claiming, lets in-flight sends finish and records them.
public struct Dispatcher: Service {
    let configuration: DispatchConfiguration
    let queue: DeliveryQueue
    let tokens: AccessTokenCache
    let fcm: FCMClient
    let metrics: DispatchMetrics
    let logger: Logger
    let inbox = AttemptInbox()
    let outbox = Outbox()
    let inFlight = InFlightDeliveries()

    init(configuration: DispatchConfiguration, client: PostgresClient, http: HTTPClient, fcm: FCMClient, metrics: DispatchMetrics, logger: Logger) {
        self.configuration = configuration
        self.queue = DeliveryQueue(client: client, worker: configuration.workerName, lease: configuration.lease, logger: logger)
        self.tokens = AccessTokenCache(
            exchange: GoogleTokenExchange(http: http, tokenURL: configuration.googleTokenURL, timeout: configuration.requestTimeout),
            longestOutage: configuration.longestTokenOutage, onRefresh: { metrics.oauthRefreshes.increment() })
        self.fcm = fcm
        self.metrics = metrics
        self.logger = logger
    }

    public func run() async throws {
        await withGracefulShutdownHandler {
            await withTaskGroup(of: Void.self) { companions in
                companions.addTask { await listenForJobs() }
                companions.addTask { await heartbeat() }
                companions.addTask { await measureQueue() }
                await withTaskGroup(of: Bool.self) { pipeline in
                    pipeline.addTask { await writeResults() }
                    let heldBack = await dispatchLoop()
                    outbox.close()
                    // Released only once every result is written: a released chunk is taken
                    // over for its devices without a row.
                    if await pipeline.next() == true { await release(heldBack) }
                }
                companions.cancelAll()
            }
        } onGracefulShutdown: {
            inbox.hintClaim()
        }
        logger.info("dispatcher stopped")
    }

    // MARK: Sending

    private typealias Claim = (claimed: DeliveryQueue.Claimed, job: DeliveryQueue.Job, account: ServiceAccount)

    struct Attempt: Sendable {
        let claimed: DeliveryQueue.Claimed
        let job: DeliveryQueue.Job
        let result: Result<FCMClient.Answer, AccessTokenError>
        /// Sent while FCM was thought unreachable, to find out whether it is back.
        let probe: Bool
    }

    /// State owned by the send loop alone.
    private struct LoopState {
        var jobs: [Int64: (job: DeliveryQueue.Job, loaded: ContinuousClock.Instant)] = [:]
        var pausedApps: [Int64: ContinuousClock.Instant] = [:]
        var failedJobs: Set<Int64> = []
        var policy: DeliveryPolicy
        var reachability: FCMReachability
        var databaseFailures = 0
        /// Due jobs with audience left to expand, oldest first, and when they were read.
        var audiences: [DeliveryQueue.Audience] = []
        var audiencesRead = ContinuousClock.Instant.now
        /// When to look for due deliveries again after a look that found too few.
        var nextDueClaim = ContinuousClock.Instant.now
        /// Devices of each chunk held here whose result is not in the outbox yet: at zero the
        /// chunk is deleted with its last results.
        var chunkDevicesLeft: [Int64: Int] = [:]
        /// Devices of a taken-over chunk beyond the free capacity, sent as capacity frees up
        /// (their chunk's lease is kept alive meanwhile).
        var heldBack: [DeliveryQueue.Claimed] = []

        /// A later answer with a shorter wait does not cut an earlier pause short.
        mutating func pause(app: Int64, for wait: Duration) {
            pausedApps[app] = max(pausedApps[app] ?? .now, .now + wait)
        }
    }

    /// How long a look for due deliveries that found too few holds: retries wait a second or
    /// more and leases run for many seconds, while a campaign claims many times a second.
    static let dueClaimPause = Duration.milliseconds(100)

    /// Deliveries per send task (and per write to a connection).
    static let sendSlice = 64

    private var stopping: Bool { Task.isShuttingDownGracefully || Task.isCancelled }

    /// Claims deliveries as capacity frees up and sends them; settles each answer in memory as
    /// it comes. It never waits for a write: the writer does those concurrently. Returns, once
    /// stopping and nothing is in flight, the leases of deliveries held back and never sent.
    private func dispatchLoop() async -> [DeliveryQueue.Lease] {
        var state = LoopState(policy: DeliveryPolicy(maxAttempts: configuration.maxAttempts),
                              reachability: FCMReachability(longestOutage: configuration.longestFCMOutage))
        var running = 0
        // Whether a claim may find something: after one that found less than it asked for, the
        // next waits for a NOTIFY or the poll interval instead of following every answer.
        var mayFindMore = true
        return await withDiscardingTaskGroup { group in
            group.addTask { await pollTicks() }
            while true {
                let (attempts, hinted) = inbox.take()
                mayFindMore = mayFindMore || hinted
                running -= attempts.count
                for attempt in attempts {
                    inFlight.remove(attempt.claimed.lease)
                    settle(attempt, state: &state)
                }
                if stopping && running == 0 { break }
                var progressed = false
                let free = configuration.concurrency - running
                let admission = state.reachability.admission(now: .now)
                // Claiming once half the capacity is free, not a quarter, halves the expansion
                // statements (each plans for ~0.4 ms besides its rows): ~8 % less database CPU
                // per delivery, measured, and 512 sends in flight still keep FCM busy.
                if !stopping && mayFindMore && admission != .closed && (free >= max(1, configuration.concurrency / 2) || running == 0) {
                    let probe = admission == .probe
                    do {
                        let (batch, exhausted) = try await claimBatch(limit: probe ? 1 : free, state: &state)
                        mayFindMore = !exhausted
                        running += batch.count
                        for claim in batch { inFlight.insert(claim.claimed.lease) }
                        if probe && !batch.isEmpty { state.reachability.probeSent() }
                        // Sent in slices, each written to the connections with one flush; every
                        // answer frees its slot as it comes.
                        for start in stride(from: 0, to: batch.count, by: Self.sendSlice) {
                            let slice = Array(batch[start..<min(start + Self.sendSlice, batch.count)])
                            group.addTask { [inbox, tokens, fcm] in
                                await Self.attempt(slice, probe: probe, tokens: tokens, fcm: fcm, report: inbox.add)
                            }
                        }
                        progressed = !exhausted
                        state.databaseFailures = 0
                    } catch {
                        state.databaseFailures += 1
                        await backOff(after: error, failures: state.databaseFailures)
                    }
                }
                // Claimed only deliveries that needed no send: claim on at once.
                if progressed && running == 0 && !stopping { continue }
                await inbox.wait()
            }
            group.cancelAll()
            return Array(Set(state.heldBack.map(\.lease)))
        }
    }

    /// Lets the loop claim at least every poll interval (a scheduled job or a retry falls due
    /// without a NOTIFY, a probe's time comes); one last hint when cancelled, so it never waits
    /// for good.
    private func pollTicks() async {
        defer { inbox.hintClaim() }
        while !Task.isCancelled {
            try? await Task.sleep(for: configuration.pollInterval)
            inbox.hintClaim()
        }
    }

    /// Held-back deliveries go to the next worker at once rather than when their lease runs
    /// out; if the database is gone, the lease still hands them over.
    private func release(_ leases: [DeliveryQueue.Lease]) async {
        guard !leases.isEmpty else { return }
        do {
            try await queue.release(leases)
        } catch {
            logger.warning("held-back deliveries wait for their lease to run out",
                           metadata: ["push.error": "\(DatabaseErrorText.describe(error))"])
        }
    }

    /// Claims what fits: due deliveries first (retries, leases taken over from a crashed
    /// worker, then its expired chunks), then the next devices of due jobs' audiences, as chunks
    /// leased to this worker. Deliveries that need no send (inactive device, job without
    /// credentials or ended meanwhile) are settled here and never reach FCM.
    /// `exhausted`: fewer deliveries were found than `limit`.
    private func claimBatch(limit: Int, state: inout LoopState) async throws -> (claims: [Claim], exhausted: Bool) {
        let now = ContinuousClock.now
        state.pausedApps = state.pausedApps.filter { $0.value > now }
        var claimed = try await takeHeldBack(upTo: limit, state: &state)
        do {
            if claimed.count < limit && now >= state.nextDueClaim {
                let paused = Array(state.pausedApps.keys)
                let due = try await queue.claim(limit: limit - claimed.count, excludingApps: paused)
                claimed += due
                if claimed.count < limit {
                    let taken = try await queue.takeOverChunks(room: limit - claimed.count, excludingApps: paused)
                    countChunkDevices(taken.claimed, state: &state)
                    claimed += taken.claimed
                    if !taken.empty.isEmpty {
                        outbox.add { batch in
                            for (chunk, job) in taken.empty {
                                batch.finishedChunks.append(chunk)
                                batch.touchedJobs.insert(job)
                            }
                        }
                    }
                }
                if claimed.count < limit { state.nextDueClaim = now + Self.dueClaimPause }
            }
            if claimed.count < limit { try await expandAudiences(upTo: limit, into: &claimed, state: &state) }
        } catch _ where !claimed.isEmpty {
            // What is leased already is sent now rather than after its lease; the database's
            // failure shows again on the next claim.
        }
        let exhausted = claimed.count < limit
        if claimed.count > limit {
            holdBack(claimed[limit...], state: &state)
            claimed.removeLast(claimed.count - limit)
        }
        guard !claimed.isEmpty else { return ([], exhausted) }
        // New credentials in `apps` take effect within seconds, without a restart.
        let stale = Set(claimed.map(\.jobID)).filter { state.jobs[$0].map { now - $0.loaded > .seconds(5) } ?? true }
        if !stale.isEmpty {
            let loaded: [DeliveryQueue.Job]
            do {
                loaded = try await queue.jobs(Array(stale))
            } catch {
                // Leased already: kept (and their leases kept alive) for the next claim.
                holdBack(claimed[...], state: &state)
                throw error
            }
            for job in loaded { state.jobs[job.id] = (job, now) }
            // Jobs not claimed for a minute are finished or paused: a long-running worker keeps
            // only what it is working on.
            for (id, entry) in state.jobs where now - entry.loaded > .seconds(60) {
                state.jobs[id] = nil
                state.failedJobs.remove(id)
                state.policy.forget(job: id)
            }
        }
        var batch: [Claim] = []
        for delivery in claimed {
            guard let job = state.jobs[delivery.jobID]?.job else { continue }
            if !delivery.jobRunning {
                // Recorded as a retry without an attempt: the write turns it into the job's ending.
                finish(delivery, job: job, status: "pending", code: "JOB_ENDED", message: "", state: &state)
                continue
            }
            if !delivery.deviceActive {
                finish(delivery, job: job, status: "skipped", code: "DEVICE_INACTIVE", message: "the device was deactivated before its turn",
                       state: &state)
                continue
            }
            guard let account = job.account else {
                let reason = "app \(job.appCode): no FCM credentials (pushctl app set-credentials --code \(job.appCode))"
                finish(delivery, job: job, status: "failed", code: "NO_CREDENTIALS", message: reason, state: &state)
                failJob(job.id, reason, state: &state)
                continue
            }
            batch.append((delivery, job, account))
        }
        return (batch, exhausted)
    }

    /// Adds the next devices of due jobs' audiences to `claimed`, up to `limit`, as chunks
    /// leased to this worker. The list of such jobs is read again when it runs out, and at least
    /// every poll interval (a scheduled job falls due without a NOTIFY).
    private func expandAudiences(upTo limit: Int, into claimed: inout [DeliveryQueue.Claimed], state: inout LoopState) async throws {
        let now = ContinuousClock.now
        if state.audiences.isEmpty || now - state.audiencesRead >= configuration.pollInterval {
            state.audiences = try await queue.unexpandedJobs(excludingApps: Array(state.pausedApps.keys),
                                                             excludingJobs: Array(state.failedJobs), limit: 16)
            state.audiencesRead = now
        }
        while claimed.count < limit, let audience = state.audiences.first {
            guard state.pausedApps[audience.app] == nil, !state.failedJobs.contains(audience.job) else {
                state.audiences.removeFirst()
                continue
            }
            let expanded = try await queue.expandAndClaim(audience, limit: limit - claimed.count)
            countChunkDevices(expanded.claimed, state: &state)
            claimed += expanded.claimed
            if expanded.complete {
                state.audiences.removeFirst()
                // An empty audience completes here; others when their last result is written.
                outbox.add { _ = $0.touchedJobs.insert(audience.job) }
            }
        }
    }

    private func holdBack(_ deliveries: ArraySlice<DeliveryQueue.Claimed>, state: inout LoopState) {
        state.heldBack += deliveries
        for delivery in deliveries { inFlight.insert(delivery.lease) }
    }

    /// Held-back deliveries first, up to `limit`; those of a job that ended meanwhile are
    /// recorded as its ending says, not sent.
    private func takeHeldBack(upTo limit: Int, state: inout LoopState) async throws -> [DeliveryQueue.Claimed] {
        guard !state.heldBack.isEmpty else { return [] }
        let running = try await queue.running(Array(Set(state.heldBack.prefix(limit).map(\.jobID))))
        let taken = state.heldBack.prefix(limit).map { delivery in
            delivery.jobRunning && !running.contains(delivery.jobID) ? delivery.ended : delivery
        }
        state.heldBack.removeFirst(taken.count)
        for delivery in taken { inFlight.remove(delivery.lease) }
        return taken
    }

    private func countChunkDevices(_ claimed: [DeliveryQueue.Claimed], state: inout LoopState) {
        for delivery in claimed {
            if case .chunk(let chunk) = delivery.lease { state.chunkDevicesLeft[chunk, default: 0] += 1 }
        }
    }

    private func finish(_ delivery: DeliveryQueue.Claimed, job: DeliveryQueue.Job, status: String, code: String, message: String,
                        state: inout LoopState) {
        let result = DeliveryQueue.Result(delivery, status: status, errorCode: code, errorMessage: message, messageID: nil,
                                          attempted: false, nextAttempt: Date())
        record(result, state: &state) { _ in }
        metrics.countSend(app: job.appCode, outcome: code)
    }

    /// Hands a result to the writer, with the chunk it finishes, if any: a chunk is deleted in
    /// the statement that writes its last row, never before.
    private func record(_ result: DeliveryQueue.Result, state: inout LoopState, also change: (inout Outbox.Batch) -> Void) {
        var finishedChunk: Int64?
        if case .chunk(let chunk) = result.lease, let left = state.chunkDevicesLeft[chunk] {
            if left > 1 {
                state.chunkDevicesLeft[chunk] = left - 1
            } else {
                state.chunkDevicesLeft[chunk] = nil
                finishedChunk = chunk
            }
        }
        outbox.add { batch in
            batch.results.append(result)
            batch.touchedJobs.insert(result.jobID)
            if let finishedChunk { batch.finishedChunks.append(finishedChunk) }
            change(&batch)
        }
    }

    /// Sends a claimed batch, a request per delivery, each job's share with its app's access
    /// token, and reports each delivery's attempt as its answer comes; a 401 gets one token
    /// refresh and one more try.
    private static func attempt(_ batch: [Claim], probe: Bool, tokens: AccessTokenCache, fcm: FCMClient,
                                report: @escaping @Sendable (Attempt) -> Void) async {
        let byJob = Dictionary(grouping: batch, by: { $0.job.id }).values
        guard byJob.count > 1 else { return await attempt(sameJob: batch, probe: probe, tokens: tokens, fcm: fcm, report: report) }
        await withTaskGroup(of: Void.self) { group in
            for claims in byJob { group.addTask { await attempt(sameJob: claims, probe: probe, tokens: tokens, fcm: fcm, report: report) } }
        }
    }

    private static func attempt(sameJob claims: [Claim], probe: Bool, tokens: AccessTokenCache, fcm: FCMClient,
                                report: @escaping @Sendable (Attempt) -> Void) async {
        let job = claims[0].job, account = claims[0].account
        let sends = claims.map { FCMClient.Send(message: job.message, target: $0.claimed.token, type: $0.claimed.tokenType) }
        func failed(_ index: Int, _ error: any Error) {
            report(Attempt(claimed: claims[index].claimed, job: job, result: .failure(error as? AccessTokenError ?? .transient("\(error)")),
                           probe: probe))
        }
        let token: String
        do {
            token = try await tokens.token(for: account)
        } catch {
            for index in claims.indices { failed(index, error) }
            return
        }
        let expired = Mutex<[Int]>([])
        await fcm.send(sends, projectID: account.projectID, accessToken: token) { index, answer in
            if case .answered(.unauthenticated, _) = answer {
                expired.withLock { $0.append(index) }
            } else {
                report(Attempt(claimed: claims[index].claimed, job: job, result: .success(answer), probe: probe))
            }
        }
        let refused = expired.withLock { $0 }
        guard !refused.isEmpty else { return }
        // Expired or revoked: one refresh, one retry. A failed refresh settles only those sends:
        // the others' answers stand (a success must never be sent again).
        await tokens.invalidate(token, for: account)
        do {
            let fresh = try await tokens.token(for: account)
            await fcm.send(refused.map { sends[$0] }, projectID: account.projectID, accessToken: fresh) { index, answer in
                report(Attempt(claimed: claims[refused[index]].claimed, job: job, result: .success(answer), probe: probe))
            }
        } catch {
            for index in refused { failed(index, error) }
        }
    }

    private func settle(_ attempt: Attempt, state: inout LoopState) {
        let job = attempt.job
        let outcome: SendOutcome
        switch attempt.result {
        case .success(.answered(let answered, let elapsed)):
            outcome = answered
            if let elapsed {
                metrics.fcmLatency.record(elapsed)
                state.reachability.answered()
            } else if attempt.probe {
                state.reachability.probeInconclusive()
            }
        case .success(.notSent(let reason, let unreachable)):
            let now = ContinuousClock.now
            switch state.reachability.notSent(unreachable: unreachable, probe: attempt.probe, now: now) {
            case .retry(let at):
                // Nothing reached FCM: no attempt is spent; the delivery waits for the breaker.
                let retry = DeliveryQueue.Result(attempt.claimed, status: "pending", errorCode: unreachable ? "FCM_UNREACHABLE" : "NOT_SENT",
                                                 errorMessage: String(reason.prefix(500)), messageID: nil, attempted: false,
                                                 nextAttempt: Date().addingTimeInterval(DeliveryPolicy.seconds(at - now)))
                record(retry, state: &state) { _ in }
                metrics.countSend(app: job.appCode, outcome: "not_sent")
            case .giveUp(let bound):
                let message = "FCM unreachable for over \(bound.components.seconds) s: \(reason)"
                finish(attempt.claimed, job: job, status: "failed", code: "FCM_UNREACHABLE", message: message, state: &state)
                failJob(job.id, "app \(job.appCode): \(message)", state: &state)
            }
            return
        case .failure(let error) where error.isPermanent:
            if attempt.probe { state.reachability.probeInconclusive() }
            let reason = "app \(job.appCode): \(error)"
            finish(attempt.claimed, job: job, status: "failed", code: error.errorCode, message: reason, state: &state)
            failJob(job.id, reason, state: &state)
            return
        case .failure(let error):
            if attempt.probe { state.reachability.probeInconclusive() }
            // Nothing reached FCM: no attempt is spent. The delivery and the app wait for the
            // token endpoint, whose unavailability the token cache backs off from.
            let wait = if case .transient(_, let retryAfter?) = error { retryAfter } else { Duration.seconds(1) }
            let retry = DeliveryQueue.Result(attempt.claimed, status: "pending", errorCode: "OAUTH_UNAVAILABLE",
                                             errorMessage: "app \(job.appCode): \(error)", messageID: nil, attempted: false,
                                             nextAttempt: Date().addingTimeInterval(DeliveryPolicy.seconds(wait)))
            record(retry, state: &state) { _ in }
            state.pause(app: job.appID, for: wait)
            metrics.countSend(app: job.appCode, outcome: "retry")
            return
        }
        let decision = state.policy.decide(outcome, for: attempt.claimed, job: job)
        record(decision.result, state: &state) { batch in
            if let deactivate = decision.deactivate { batch.deactivations.append(deactivate) }
        }
        if let deactivate = decision.deactivate {
            logger.info("device deactivated", metadata: [
                "push.app": "\(job.appCode)", "push.device_id": "\(deactivate.deviceID)", "push.reason": "\(deactivate.reason)",
                "push.token": "\(maskedToken(attempt.claimed.token))",
            ])
        }
        if let pause = decision.pauseApp {
            state.pause(app: job.appID, for: pause)
            logger.warning("FCM quota exceeded, slowing the app down", metadata: ["push.app": "\(job.appCode)", "push.pause": "\(pause)"])
        }
        if let proved = decision.proved { outbox.add { $0.provenProjects.append(proved) } }
        if let warning = decision.warning { logger.warning("\(warning)", metadata: ["push.job_id": "\(job.id)"]) }
        if let reason = decision.failJob { failJob(job.id, reason, state: &state) }
        let metricOutcome = if case .noAnswer = outcome { "no_answer" } else if decision.result.status == "pending" { "retry" }
            else { decision.result.errorCode ?? decision.result.status }
        metrics.countSend(app: job.appCode, outcome: metricOutcome)
    }

    private func failJob(_ job: Int64, _ reason: String, state: inout LoopState) {
        guard state.failedJobs.insert(job).inserted else { return }
        outbox.add { $0.jobFailures.append((job, reason)) }
    }

    // MARK: Writing

    /// Writes the outbox every 50 ms, or at once when a batch is full; after the send loop
    /// closes it, writes what is left and returns true. A failed write is kept and retried;
    /// false when it gave up at a shutdown.
    private func writeResults() async -> Bool {
        var failures = 0
        while true {
            let (batch, closed) = outbox.take()
            if !batch.isEmpty {
                do {
                    try await write(batch)
                    failures = 0
                } catch {
                    outbox.putBack(batch)
                    failures += 1
                    // During a shutdown give up after about the drain bound: the leases run out
                    // and another worker settles those deliveries.
                    if (closed || Task.isCancelled) && failures > 20 {
                        logger.error("giving up writing results at shutdown", metadata: ["push.error": "\(DatabaseErrorText.describe(error))"])
                        return false
                    }
                    await backOff(after: error, failures: failures)
                    continue
                }
            }
            // Closed: nothing more comes, and everything taken is written.
            if closed { return true }
            if Task.isCancelled {
                await outbox.full.waitForSignal()
            } else {
                await outbox.full.wait(upTo: .milliseconds(50))
            }
        }
    }

    private func write(_ batch: Outbox.Batch) async throws {
        try await queue.record(batch.results, finishedChunks: batch.finishedChunks, deactivate: batch.deactivations)
        if !batch.provenProjects.isEmpty { try await queue.prove(batch.provenProjects) }
        for (job, reason) in batch.jobFailures {
            try await queue.fail(job: job, error: reason)
            logger.error("job failed", metadata: ["push.job_id": "\(job)", "push.error": "\(reason)"])
        }
        try await queue.completeFinished(Array(batch.touchedJobs))
    }

    /// The database went away: back off (250 ms doubling to 5 s) and try again.
    private func backOff(after error: any Error, failures: Int) async {
        let delay = min(0.25 * Double(1 << min(failures, 5)), 5)
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
                        for try await _ in notifications { inbox.hintClaim() }
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
            let leases = inFlight.all()
            do {
                try await queue.heartbeat(leases)
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

/// What reaches the send loop while it waits: each delivery's attempt as its answer comes, and
/// hints that a claim may find something (NOTIFY, the poll interval, a graceful shutdown).
final class AttemptInbox: Sendable {
    private let state = Mutex<(attempts: [Dispatcher.Attempt], hinted: Bool)>(([], false))
    private let signal = WakeSignal()

    @Sendable func add(_ attempt: Dispatcher.Attempt) {
        state.withLock { $0.attempts.append(attempt) }
        signal.signal()
    }

    func hintClaim() {
        state.withLock { $0.hinted = true }
        signal.signal()
    }

    func take() -> (attempts: [Dispatcher.Attempt], hinted: Bool) {
        state.withLock { state in
            defer { state = ([], false) }
            return state
        }
    }

    /// Returns once something was added or hinted since the last `take` (at once if so already).
    func wait() async {
        if state.withLock({ !$0.attempts.isEmpty || $0.hinted }) { return }
        await signal.waitForSignal()
    }
}

/// The leases of deliveries whose sends are in flight, shared by the loop and the heartbeat;
/// a chunk's lease counts once per device.
final class InFlightDeliveries: Sendable {
    private let leases = Mutex<[DeliveryQueue.Lease: Int]>([:])
    func insert(_ lease: DeliveryQueue.Lease) { leases.withLock { $0[lease, default: 0] += 1 } }
    func remove(_ lease: DeliveryQueue.Lease) {
        leases.withLock { leases in
            if let count = leases[lease], count > 1 { leases[lease] = count - 1 } else { leases[lease] = nil }
        }
    }
    func all() -> [DeliveryQueue.Lease] { leases.withLock { Array($0.keys) } }
}
