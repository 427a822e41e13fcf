import AsyncHTTPClient
import DeviceRegistry
import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle
import ServiceSupport
import Synchronization

/// The dispatch loop, as a service: claims deliveries in batches sized to free capacity (due
/// ones first, then the next devices of due jobs' audiences), sends them concurrently (at most
/// `concurrency` in flight), settles each answer as it comes (a slow one holds back nothing but
/// its own slot), and writes the results back in batches. Woken by NOTIFY on `push_jobs`,
/// polling as a fallback; stops sending while FCM cannot be reached (FCMReachability). On
/// graceful shutdown it stops claiming, lets in-flight sends finish and records them.
public struct Dispatcher: Service, CustomStringConvertible {
    let configuration: DispatchConfiguration
    let wakeUps: JobWakeUps
    let queue: DeliveryQueue
    let tokens: AccessTokenCache
    let fcm: FCMClient
    let metrics: DispatchMetrics
    let logger: Logger
    let inbox = AttemptInbox()
    let outbox = Outbox()
    let urgentOutbox = Outbox(urgent: true)
    let inFlight = InFlightDeliveries()
    /// How ServiceLifecycle names it in its log: its settings hold DATABASE_URL, password and all.
    public var description: String { "Dispatcher(worker: \(configuration.workerName))" }

    init(
        configuration: DispatchConfiguration, wakeUps: JobWakeUps, client: PostgresClient, pooler: PoolerMode, http: HTTPClient,
        fcm: FCMClient, metrics: DispatchMetrics, logger: Logger
    ) {
        self.configuration = configuration
        self.wakeUps = wakeUps
        self.queue = DeliveryQueue(
            client: client, worker: configuration.workerName, lease: configuration.lease, logger: logger, pooler: pooler)
        self.tokens = AccessTokenCache(
            exchange: GoogleTokenExchange(http: http, tokenURL: configuration.googleTokenURL, timeout: configuration.requestTimeout),
            longestOutage: configuration.longestTokenOutage, newKeyGrace: configuration.newKeyGrace,
            onRefresh: { metrics.oauthRefreshes.increment() })
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
                companions.addTask { await settleExpiriesAndEndings() }
                companions.addTask { await watchDatabase() }
                await withTaskGroup(of: Bool.self) { pipeline in
                    pipeline.addTask { await writeResults(from: outbox) }
                    pipeline.addTask { await writeResults(from: urgentOutbox) }
                    let unsent = await dispatchLoop()
                    outbox.close()
                    urgentOutbox.close()
                    // Released only once every result is written: a released chunk is taken
                    // over for its devices without a row.
                    var written = true
                    for await done in pipeline { written = written && done }
                    if written { await release(unsent) }
                }
                companions.cancelAll()
            }
        } onGracefulShutdown: {
            inbox.hintClaim()
        }
        if Task.isCancelled {
            logger.warning(
                "drain bound passed: stopped without waiting further; deliveries not recorded are settled by another worker when their leases run out",
                metadata: ["push.drain_bound": "\(configuration.drainBound)"])
        }
        logger.info("dispatcher stopped")
    }

    // MARK: Sending

    typealias Attempt = DispatchStateMachine.Attempt
    private typealias Claim = DispatchStateMachine.Claim

    /// How long a look for due deliveries that found too few holds: retries wait a second or
    /// more and leases run for many seconds, while a campaign claims many times a second.
    static let dueClaimPause = Duration.milliseconds(100)

    /// Deliveries per send task (and per write to a connection).
    static let sendSlice = 64

    private var stopping: Bool { Task.isShuttingDownGracefully || Task.isCancelled }

    /// Runs the state machine: hands it each event (answers, claims, hints) as it comes and
    /// carries out what it decides; claims run as tasks beside the sends, so that slots are
    /// refilled while a claim is on its way. It never waits for a write: the writer does those
    /// concurrently. Returns, once stopping and nothing is in flight, the leases of deliveries
    /// claimed and never sent.
    private func dispatchLoop() async -> [DeliveryQueue.Lease] {
        var machine = DispatchStateMachine(
            concurrency: configuration.concurrency, maxAttempts: configuration.maxAttempts,
            longestFCMOutage: configuration.longestFCMOutage)
        return await withDiscardingTaskGroup { group in
            group.addTask { await pollTicks() }
            while true {
                let events = inbox.take()
                if events.hinted { machine.hinted() }
                // Before the claims: one begun before a job's ending read it running.
                machine.jobsEnded(events.endedJobs, now: .now)
                for claim in events.claims {
                    switch claim.result {
                    case .success(let result): perform(machine.claimed(result, for: claim.request, now: .now), in: &group)
                    case .failure: machine.claimFailed(claim.request)
                    }
                }
                if !events.attempts.isEmpty {
                    inFlight.remove(events.attempts.map(\.claimed.lease))
                    perform(machine.answered(events.attempts, now: .now), in: &group)
                }
                let (actions, done) = machine.poll(now: .now, stopping: stopping)
                perform(actions, in: &group)
                if done { break }
                await inbox.wait()
            }
            group.cancelAll()
            return Array(Set(machine.waiting.map(\.lease)))
        }
    }

    private func perform(_ actions: [DispatchStateMachine.Action], in group: inout DiscardingTaskGroup) {
        for action in actions {
            switch action {
            case .send(let batch, let probe, let sentAt):
                // Sent in slices, each written to the connections with one flush; every answer
                // frees its slot as it comes.
                for start in stride(from: 0, to: batch.count, by: Self.sendSlice) {
                    let slice = Array(batch[start..<min(start + Self.sendSlice, batch.count)])
                    group.addTask { [inbox, tokens, fcm] in
                        await Self.attempt(slice, probe: probe, sentAt: sentAt, tokens: tokens, fcm: fcm, report: inbox.add)
                    }
                }
            case .claim(let request):
                group.addTask { [self] in
                    inbox.add(ClaimOutcome(request: request, result: await claim(request)))
                }
            case .write(let batch):
                (batch.urgent ? urgentOutbox : outbox).add { $0.merge(batch) }
            case .keepLeased(let leases):
                inFlight.insert(leases)
            case .forgetLeased(let leases):
                inFlight.remove(leases)
            case .log(let level, let message, let metadata):
                logger.log(level: level, "\(message)", metadata: metadata)
            case .countSend(let app, let outcome, let times):
                metrics.countSend(app: app, outcome: outcome, times: times)
            case .recordLatency(let elapsed):
                metrics.fcmLatency.record(elapsed)
            }
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

    /// Claimed deliveries never sent go to the next worker at once rather than when their lease
    /// runs out; if the database is gone, the lease still hands them over.
    private func release(_ leases: [DeliveryQueue.Lease]) async {
        guard !leases.isEmpty else { return }
        do {
            try await queue.release(leases)
        } catch {
            logger.warning(
                "claimed deliveries wait for their lease to run out",
                metadata: ["push.error": "\(DatabaseErrorText.describe(error))"])
        }
    }

    /// A claim's queries: whether the jobs of ready deliveries still run, then due deliveries
    /// (retries, leases taken over from a crashed worker, then its expired chunks), then the next
    /// devices of due jobs' audiences, as chunks leased to this worker; then the details of jobs
    /// not read lately. May find more than `limit` (a taken-over chunk is taken whole). What was
    /// leased before a failure is returned, not lost; a failure with nothing leased is reported
    /// after the request's backoff.
    private func claim(_ request: DispatchStateMachine.ClaimRequest) async -> Result<DispatchStateMachine.ClaimResult, any Error> {
        let now = ContinuousClock.now
        var cursor = request.cursor
        var claimed: [DeliveryQueue.Claimed] = []
        var running: Set<Int64> = []
        var stoppedEarly = false
        var loaded: [DeliveryQueue.Job] = []
        var failure: (any Error)?
        do {
            if !request.recheckJobs.isEmpty { running = try await queue.running(request.recheckJobs) }
            let limit = request.limit
            // A high-priority claim only expands audiences: due retries wait for the usual claim.
            if limit > 0 && request.priority == nil && now >= cursor.nextDueClaim {
                claimed += try await queue.claim(limit: limit, excludingApps: request.pausedApps)
                if claimed.count < limit {
                    let taken = try await queue.takeOverChunks(room: limit - claimed.count, excludingApps: request.pausedApps)
                    claimed += taken.claimed
                    // Not those a stopping worker released: it sent none of them.
                    let abandoned = taken.claimed.filter(\.mayHaveBeenSent)
                    if !abandoned.isEmpty {
                        logger.notice(
                            "took over chunks whose worker's lease ran out (it stopped, or lost the database); what it may have sent without a record goes again",
                            metadata: [
                                "push.chunks": "\(Set(abandoned.map(\.lease)).count)", "push.devices": "\(abandoned.count)",
                            ])
                    }
                    if !taken.empty.isEmpty {
                        outbox.add { batch in
                            for (chunk, job) in taken.empty {
                                batch.finishedChunks.append(chunk)
                                batch.touchedJobs.insert(job)
                            }
                        }
                    }
                }
                if claimed.count < limit { cursor.nextDueClaim = now + Self.dueClaimPause }
            }
            if claimed.count < limit {
                stoppedEarly = try await expandAudiences(
                    upTo: limit, into: &claimed, request: request, cursor: &cursor,
                    loaded: &loaded)
            }
        } catch {
            failure = error
        }
        // Ready deliveries' jobs too: a job forgotten while its deliveries waited (an outage
        // longer than the job memory) is read again, or they would wait for good.
        let unknown = Set(claimed.map(\.jobID)).union(request.recheckJobs).subtracting(request.freshJobs)
            .subtracting(loaded.map(\.id))
        if !unknown.isEmpty && failure == nil {
            do {
                loaded += try await queue.jobs(unknown.sorted())
            } catch {
                failure = error
            }
        }
        if let failure {
            logger.databaseRetry(after: failure, retryIn: request.backoff, task: "claiming deliveries")
            // What is leased already waits (its lease kept alive) for its job's details: the
            // next claim reads them.
            guard !claimed.isEmpty else {
                try? await Task.sleep(for: request.backoff)
                return .failure(failure)
            }
        }
        return .success(.init(claimed: claimed, loadedJobs: loaded, runningJobs: running, cursor: cursor, stoppedEarly: stoppedEarly))
    }

    /// Adds the next devices of due jobs' audiences to `claimed`, up to `limit`, as chunks
    /// leased to this worker, shared among the audiences by ``AudienceShares``. The list of such
    /// jobs is read again when it runs out, after a hint and at least every poll interval (a
    /// scheduled job falls due without a NOTIFY); a high-priority claim reads its own, and the
    /// details of its jobs (`loaded`) while it expands them, since they are new. True when it
    /// stopped early to hand high-priority deliveries over at once.
    private func expandAudiences(
        upTo limit: Int, into claimed: inout [DeliveryQueue.Claimed], request: DispatchStateMachine.ClaimRequest,
        cursor: inout DispatchStateMachine.ClaimCursor, loaded: inout [DeliveryQueue.Job]
    ) async throws -> Bool {
        let now = ContinuousClock.now
        if let priority = request.priority {
            var audiences = try await queue.unexpandedJobs(
                excludingApps: request.pausedApps, excludingJobs: request.failedJobs,
                priority: priority, limit: Self.audiencesRead)
            let unknown = audiences.map(\.job).filter { !request.freshJobs.contains($0) }
            async let details = unknown.isEmpty ? [] : queue.jobs(unknown)
            let stopped = try await expand(&audiences, upTo: limit, turn: 0, into: &claimed)
            loaded = try await details
            return stopped
        }
        if cursor.audiences.isEmpty || request.refreshAudiences || now - cursor.audiencesRead >= configuration.pollInterval {
            cursor.audiences = try await queue.unexpandedJobs(
                excludingApps: request.pausedApps, excludingJobs: request.failedJobs,
                limit: Self.audiencesRead)
            cursor.audiencesRead = now
        }
        let paused = Set(request.pausedApps)
        let failed = Set(request.failedJobs)
        cursor.audiences.removeAll { paused.contains($0.app) || failed.contains($0.job) }
        cursor.expansions += 1
        return try await expand(&cursor.audiences, upTo: limit, turn: cursor.expansions, into: &claimed)
    }

    /// Due audiences read at a time: enough to see several apps' jobs of each priority.
    static let audiencesRead = 64

    /// Expands `audiences` as ``AudienceShares`` plans, again with what is left until `limit` is
    /// reached or nothing more comes; drops those that are complete. A rate-capped app's share is
    /// what its budget grants; an app with none left is passed over for this claim. Once a pass
    /// took high-priority deliveries it returns true at once: they go out while the next claim
    /// takes the rest.
    private func expand(
        _ audiences: inout [DeliveryQueue.Audience], upTo limit: Int, turn: Int,
        into claimed: inout [DeliveryQueue.Claimed]
    ) async throws -> Bool {
        var spent: Set<Int64> = []
        while claimed.count < limit {
            let plan = AudienceShares.plan(audiences.filter { !spent.contains($0.app) }, room: limit - claimed.count, turn: turn)
            guard !plan.isEmpty else { return false }
            var progressed = false
            var tookHigh = false
            for (audience, share) in plan {
                var granted = share
                if audience.rateCapped {
                    granted = try await queue.takeSendBudget(app: audience.app, wanted: share)
                    guard granted > 0 else {
                        spent.insert(audience.app)
                        continue
                    }
                }
                let expanded = try await queue.expandAndClaim(audience, limit: granted)
                claimed += expanded.claimed
                if audience.rateCapped && expanded.claimed.count < granted {
                    _ = try await queue.takeSendBudget(app: audience.app, wanted: expanded.claimed.count - granted)
                }
                if !expanded.claimed.isEmpty {
                    progressed = true
                    if audience.priority == .high { tookHigh = true }
                }
                if expanded.complete {
                    progressed = true
                    audiences.removeAll { $0.job == audience.job }
                    // An empty audience completes here; others when their last result is written.
                    outbox.add { _ = $0.touchedJobs.insert(audience.job) }
                }
            }
            if tookHigh && claimed.count < limit { return true }
            if !progressed { return false }
        }
        return false
    }

    /// Sends a claimed batch, a request per delivery, each job's share with its app's access
    /// token, and reports each delivery's attempt as its answer comes; a 401 gets one token
    /// refresh and one more try.
    private static func attempt(
        _ batch: [Claim], probe: Bool, sentAt: ContinuousClock.Instant, tokens: AccessTokenCache, fcm: FCMClient,
        report: @escaping @Sendable (Attempt) -> Void
    ) async {
        let byJob = Dictionary(grouping: batch, by: { $0.job.id }).values
        guard byJob.count > 1 else {
            return await attempt(sameJob: batch, probe: probe, sentAt: sentAt, tokens: tokens, fcm: fcm, report: report)
        }
        await withTaskGroup(of: Void.self) { group in
            for claims in byJob {
                group.addTask { await attempt(sameJob: claims, probe: probe, sentAt: sentAt, tokens: tokens, fcm: fcm, report: report) }
            }
        }
    }

    private static func attempt(
        sameJob claims: [Claim], probe: Bool, sentAt: ContinuousClock.Instant, tokens: AccessTokenCache, fcm: FCMClient,
        report: @escaping @Sendable (Attempt) -> Void
    ) async {
        let job = claims[0].job
        let account = claims[0].account
        let sends = claims.map { FCMClient.Send(message: job.message, target: $0.claimed.token, type: $0.claimed.tokenType) }
        func failed(_ index: Int, _ error: any Error) {
            report(
                Attempt(
                    claimed: claims[index].claimed, job: job, result: .failure(error as? AccessTokenError ?? .transient("\(error)")),
                    probe: probe, sentAt: sentAt))
        }
        let token: String
        do {
            token = try await tokens.token(for: account)
        } catch {
            for index in claims.indices { failed(index, error) }
            return
        }
        let expired = Mutex<[Int]>([])
        let express = job.priority == .high
        await fcm.send(sends, projectID: account.projectID, accessToken: token, express: express) { index, answer in
            if case .answered(.unauthenticated, _) = answer {
                expired.withLock { $0.append(index) }
            } else {
                report(Attempt(claimed: claims[index].claimed, job: job, result: .success(answer), probe: probe, sentAt: sentAt))
            }
        }
        let refused = expired.withLock { $0 }
        guard !refused.isEmpty else { return }
        // Expired or revoked: one refresh, one retry. A failed refresh settles only those sends:
        // the others' answers stand (a success must never be sent again).
        await tokens.invalidate(token, for: account)
        do {
            let fresh = try await tokens.token(for: account)
            await fcm.send(refused.map { sends[$0] }, projectID: account.projectID, accessToken: fresh, express: express) { index, answer in
                report(Attempt(claimed: claims[refused[index]].claimed, job: job, result: .success(answer), probe: probe, sentAt: sentAt))
            }
        } catch {
            for index in refused { failed(index, error) }
        }
    }

    // MARK: Writing

    /// Writes `outbox` every 50 ms, or at once when a batch is full (an urgent outbox at each
    /// addition); after the send loop closes it, writes what is left and returns true. A failed
    /// write is kept and retried; false when it gave up at a shutdown.
    private func writeResults(from outbox: Outbox) async -> Bool {
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
                    // During a shutdown give up after about the drain bound, at once past it (the
                    // worker is cancelled: a failed write is its own cancellation, and waits
                    // return at once). The leases run out and another worker settles those
                    // deliveries.
                    if Task.isCancelled || (closed && failures > 20) {
                        logger.error(
                            "giving up writing results at shutdown",
                            metadata: ["push.error": "\(DatabaseErrorText.describe(error))", "push.results": "\(batch.results.count)"])
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
        let ended = try await queue.write(batch)
        for (job, reason) in batch.jobFailures {
            if ended.contains(job) {
                logger.error("job failed", metadata: ["push.job_id": "\(job)", "push.error": "\(reason)"])
            } else {
                logger.notice("job had already ended", metadata: ["push.job_id": "\(job)", "push.error": "\(reason)"])
            }
        }
        try await queue.completeFinished(Array(batch.touchedJobs))
    }

    /// The database went away: back off (250 ms doubling to 5 s) and try again.
    private func backOff(after error: any Error, failures: Int) async {
        let wait = DispatchStateMachine.databaseBackoff(failures: failures)
        logger.databaseRetry(after: error, retryIn: wait, task: "writing results")
        try? await Task.sleep(for: wait)
    }

    // MARK: Companions

    /// NOTIFY push_jobs wakes the loop at once; reconnects when the database comes back. With
    /// ``JobWakeUps/polling`` there is nothing to listen on and the poll ticks alone find jobs.
    private func listenForJobs() async {
        while !Task.isCancelled {
            do {
                switch wakeUps {
                case .polling: return
                case .listenOnPool:
                    try await queue.client.withConnection { try await listen(on: $0) }
                case .listen(let url):
                    let connection = try await PostgresConnection.connect(
                        configuration: DatabaseConfiguration.connection(url, connectTimeout: .seconds(5)), id: 0, logger: logger)
                    do {
                        try await listen(on: connection)
                    } catch {
                        try? await connection.close()
                        throw error
                    }
                    try? await connection.close()
                }
            } catch {
                if Task.isCancelled { return }
                logger.debug("LISTEN connection lost", metadata: ["push.error": "\(error)"])
            }
            try? await Task.sleep(for: .seconds(1))
        }
    }

    /// New jobs (`push_enqueue`'s NOTIFY) hint a claim; a job's ending stops its sends.
    private func listen(on connection: PostgresConnection) async throws {
        try await connection.listen(on: "push_jobs") { queued in
            try await connection.listen(on: JobDirectory.endedJobsChannel) { ended in
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { for try await _ in queued { inbox.hintClaim() } }
                    group.addTask {
                        for try await notification in ended {
                            if let id = Int64(notification.payload) { inbox.jobEnded(id) }
                        }
                    }
                    // Either ends with the connection (listen again on a new one) or when cancelled.
                    try await group.next()
                    group.cancelAll()
                }
            }
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
                // Stopping cancels the heartbeat in its statement: no database problem to report.
                if Task.isCancelled { return }
                logger.warning("lease heartbeat failed", metadata: ["push.error": "\(DatabaseErrorText.describe(error))"])
            }
        }
    }

    /// Every second: what expired jobs have left is skipped, and those with nothing in flight
    /// complete (sql/012); what cancelled and failed jobs' endings left pending is settled once
    /// no worker holds it (sql/023). Every worker does it; row locks keep them from colliding.
    private func settleExpiriesAndEndings() async {
        while !Task.isCancelled {
            do {
                for job in try await queue.expireJobs() {
                    logger.notice("job expired", metadata: ["push.job_id": "\(job)"])
                }
                let settled = try await queue.settleHeldAtEndings()
                if settled > 0 {
                    logger.notice(
                        "deliveries left pending at their job's ending are settled as the ending says",
                        metadata: ["push.deliveries": "\(settled)"])
                }
            } catch {
                logger.debug("settling expired and ended jobs failed", metadata: ["push.error": "\(DatabaseErrorText.describe(error))"])
            }
            try? await Task.sleep(for: .seconds(1))
        }
    }

    private func watchDatabase() async {
        let pings = DatabasePings()
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                while !Task.isCancelled {
                    do {
                        try await queue.ping(within: DatabaseWatch.pingDeadline)
                        pings.answered()
                    } catch {
                        pings.failed(DatabaseErrorText.describe(error))
                    }
                    try? await Task.sleep(for: DatabaseWatch.interval)
                }
            }
            group.addTask {
                var watch = DatabaseWatch()
                while !Task.isCancelled {
                    try? await Task.sleep(for: DatabaseWatch.interval)
                    let (at, error) = pings.last
                    if let line = watch.observed(lastAnswer: at, error: error, now: .now) {
                        logger.log(level: line.level, "\(line.message)", metadata: line.metadata.mapValues { .string($0) })
                    }
                }
            }
        }
    }

    private func measureQueue() async {
        while !Task.isCancelled {
            var took = Duration.zero
            if let (pending, age, cost) = try? await queue.depth() {
                metrics.queueDepth.set(Double(pending))
                metrics.oldestDueJobAge.set(age)
                took = cost
            }
            try? await Task.sleep(for: DispatchMetrics.pauseAfterMeasuringQueue(took: took))
        }
    }
}

/// A claim's request and how it ended, for the send loop.
struct ClaimOutcome: Sendable {
    let request: DispatchStateMachine.ClaimRequest
    let result: Result<DispatchStateMachine.ClaimResult, any Error>
}

/// What reaches the send loop while it waits: each delivery's attempt as its answer comes,
/// claims as they end, and hints that a claim may find something (NOTIFY, the poll interval, a
/// graceful shutdown).
final class AttemptInbox: Sendable {
    struct Events {
        var attempts: [Dispatcher.Attempt] = []
        var claims: [ClaimOutcome] = []
        var hinted = false
        /// Jobs a NOTIFY said ended (cancelled, failed).
        var endedJobs: [Int64] = []

        var isEmpty: Bool { attempts.isEmpty && claims.isEmpty && !hinted && endedJobs.isEmpty }
    }

    private let state = Mutex(Events())
    private let signal = WakeSignal()

    @Sendable func add(_ attempt: Dispatcher.Attempt) {
        state.withLock { $0.attempts.append(attempt) }
        signal.signal()
    }

    func add(_ claim: ClaimOutcome) {
        state.withLock { $0.claims.append(claim) }
        signal.signal()
    }

    func hintClaim() {
        state.withLock { $0.hinted = true }
        signal.signal()
    }

    func jobEnded(_ id: Int64) {
        state.withLock { $0.endedJobs.append(id) }
        signal.signal()
    }

    func take() -> Events {
        state.withLock { state in
            defer { state = Events() }
            return state
        }
    }

    /// Returns once something was added or hinted since the last `take` (at once if so already).
    func wait() async {
        if !state.withLock({ $0.isEmpty }) { return }
        await signal.waitForSignal()
    }
}

/// The leases of deliveries whose sends are in flight, shared by the loop and the heartbeat;
/// a chunk's lease counts once per device.
final class InFlightDeliveries: Sendable {
    private let leases = Mutex<[DeliveryQueue.Lease: Int]>([:])
    func insert(_ added: [DeliveryQueue.Lease]) {
        leases.withLock { leases in
            for lease in added { leases[lease, default: 0] += 1 }
        }
    }
    func remove(_ removed: [DeliveryQueue.Lease]) {
        leases.withLock { leases in
            for lease in removed {
                if let count = leases[lease], count > 1 { leases[lease] = count - 1 } else { leases[lease] = nil }
            }
        }
    }
    func all() -> [DeliveryQueue.Lease] { leases.withLock { Array($0.keys) } }
}
