import DeviceRegistry
import Foundation
import Logging

/// The send loop's decisions, apart from its I/O: when to claim and how much, what of a claim
/// to send, hold back or settle unsent, what each answer means, what to write, which apps to
/// pause and which jobs to fail. Events in, actions out; `Dispatcher` runs the queries and the
/// sends and carries out the actions. No clock of its own: every event brings the time.
struct DispatchStateMachine {
    typealias Claim = (claimed: DeliveryQueue.Claimed, job: DeliveryQueue.Job, account: ServiceAccount)

    /// One delivery's send, as it ended.
    struct Attempt: Sendable {
        let claimed: DeliveryQueue.Claimed
        let job: DeliveryQueue.Job
        let result: Result<FCMClient.Answer, AccessTokenError>
        /// Sent while FCM was thought unreachable, to find out whether it is back.
        let probe: Bool
    }

    /// What the loop does next.
    enum Step: Equatable {
        /// Claim up to `limit` deliveries; `probe`: one, whose fate says whether FCM is back.
        case claim(limit: Int, probe: Bool)
        /// Wait for an answer, a NOTIFY or the poll interval.
        case wait
        /// Stopping, and nothing is in flight.
        case stop
    }

    /// What the I/O layer carries out.
    enum Action {
        /// Send these, each delivery's attempt reported as its answer comes.
        case send([Claim], probe: Bool)
        /// Hand to the writer.
        case write(Outbox.Batch)
        /// Held back, unsent: their leases are kept alive until they go out or are released.
        case keepLeased([DeliveryQueue.Lease])
        case log(Logger.Level, String, Logger.Metadata)
        case countSend(app: String, outcome: String)
        case recordLatency(Duration)
    }

    let concurrency: Int
    /// Deliveries sent and not yet answered.
    private(set) var running = 0
    /// Whether a claim may find something: after one that found less than it asked for, the next
    /// waits for a hint (NOTIFY, the poll interval) instead of following every answer.
    private var mayFindMore = true
    private(set) var reachability: FCMReachability
    private var policy: DeliveryPolicy
    private var jobs: [Int64: (job: DeliveryQueue.Job, loaded: ContinuousClock.Instant)] = [:]
    private var pausedApps: [Int64: ContinuousClock.Instant] = [:]
    private(set) var failedJobs: Set<Int64> = []
    /// Devices of each chunk held here whose result is not written yet: at zero the chunk is
    /// deleted with its last results.
    private var chunkDevicesLeft: [Int64: Int] = [:]
    /// Devices of a taken-over chunk beyond the free capacity, sent as capacity frees up (their
    /// chunk's lease is kept alive meanwhile).
    private(set) var heldBack: [DeliveryQueue.Claimed] = []
    private var databaseFailures = 0

    /// Credentials in `apps` are read again after this, so new ones take effect without a restart.
    static let jobFreshness = Duration.seconds(5)
    /// Jobs not claimed for this long are finished or paused: forgotten.
    static let jobMemory = Duration.seconds(60)

    init(concurrency: Int, maxAttempts: Int, longestFCMOutage: Duration) {
        self.concurrency = concurrency
        policy = DeliveryPolicy(maxAttempts: maxAttempts)
        reachability = FCMReachability(longestOutage: longestFCMOutage)
    }

    init(concurrency: Int, policy: DeliveryPolicy, reachability: FCMReachability) {
        self.concurrency = concurrency
        self.policy = policy
        self.reachability = reachability
    }

    // MARK: Claiming

    func nextStep(now: ContinuousClock.Instant, stopping: Bool) -> Step {
        if stopping { return running == 0 ? .stop : .wait }
        let free = concurrency - running
        // Claiming once half the capacity is free, not a quarter, halves the expansion
        // statements (each plans for ~0.4 ms besides its rows): ~8 % less database CPU per
        // delivery, measured, and 512 sends in flight still keep FCM busy.
        guard mayFindMore, free >= max(1, concurrency / 2) || running == 0 else { return .wait }
        switch reachability.admission(now: now) {
        case .closed: return .wait
        case .probe: return .claim(limit: 1, probe: true)
        case .unrestricted: return .claim(limit: free, probe: false)
        }
    }

    /// A NOTIFY, the poll interval or a shutdown: a claim may find something again.
    mutating func hinted() {
        mayFindMore = true
    }

    /// Apps whose deliveries are not claimed now (FCM's quota, an unavailable token endpoint).
    mutating func pausedApps(now: ContinuousClock.Instant) -> [Int64] {
        pausedApps = pausedApps.filter { $0.value > now }
        return Array(pausedApps.keys)
    }

    func isPaused(app: Int64) -> Bool { pausedApps[app] != nil }

    /// Up to `limit` held-back deliveries, to be sent before anything new is claimed.
    mutating func takeHeldBack(upTo limit: Int) -> [DeliveryQueue.Claimed] {
        let taken = Array(heldBack.prefix(limit))
        heldBack.removeFirst(taken.count)
        return taken
    }

    /// Deliveries claimed as devices of chunks leased to this worker (expanded or taken over).
    mutating func leased(_ claimed: [DeliveryQueue.Claimed]) {
        for delivery in claimed {
            if case .chunk(let chunk) = delivery.lease { chunkDevicesLeft[chunk, default: 0] += 1 }
        }
    }

    /// Held back when the claim could not finish (its jobs could not be read): kept, leases alive,
    /// for the next claim.
    mutating func holdBack(_ claimed: [DeliveryQueue.Claimed]) {
        heldBack += claimed
    }

    /// The jobs of `ids` whose details must be read (again) before their deliveries go out.
    func staleJobs(_ ids: Set<Int64>, now: ContinuousClock.Instant) -> [Int64] {
        ids.filter { jobs[$0].map { now - $0.loaded > Self.jobFreshness } ?? true }.sorted()
    }

    mutating func jobsLoaded(_ loaded: [DeliveryQueue.Job], now: ContinuousClock.Instant) {
        for job in loaded { jobs[job.id] = (job, now) }
        // A long-running worker keeps only what it is working on.
        for (id, entry) in jobs where now - entry.loaded > Self.jobMemory {
            jobs[id] = nil
            failedJobs.remove(id)
            policy.forget(job: id)
        }
    }

    /// A claim that asked for `limit` found `claimed` (held-back ones first): what fits is sent,
    /// the rest held back; deliveries that need no send (their job ended, their device was
    /// deactivated, their app has no credentials) are settled here and never reach FCM.
    mutating func claimed(_ claimed: [DeliveryQueue.Claimed], limit: Int, probe: Bool, now: Date = Date()) -> [Action] {
        databaseFailures = 0
        mayFindMore = claimed.count >= limit
        var claimed = claimed
        var actions: [Action] = []
        if claimed.count > limit {
            heldBack += claimed[limit...]
            actions.append(.keepLeased(claimed[limit...].map(\.lease)))
            claimed.removeLast(claimed.count - limit)
        }
        var batch: [Claim] = []
        var settled = Outbox.Batch()
        for delivery in claimed {
            guard let job = jobs[delivery.jobID]?.job else { continue }
            if !delivery.jobRunning {
                // Recorded as a retry without an attempt: the write turns it into the job's ending.
                settle(delivery, job: job, status: "pending", code: "JOB_ENDED", message: "", into: &settled, actions: &actions, now: now)
            } else if !delivery.deviceActive {
                settle(delivery, job: job, status: "skipped", code: "DEVICE_INACTIVE", message: "the device was deactivated before its turn",
                       into: &settled, actions: &actions, now: now)
            } else if let account = job.account {
                batch.append((delivery, job, account))
            } else {
                let reason = "app \(job.appCode): no FCM credentials (pushctl app set-credentials --code \(job.appCode))"
                settle(delivery, job: job, status: "failed", code: "NO_CREDENTIALS", message: reason, into: &settled, actions: &actions, now: now)
                failJob(job.id, reason, into: &settled)
            }
        }
        running += batch.count
        if probe && !batch.isEmpty { reachability.probeSent() }
        if !settled.isEmpty { actions.append(.write(settled)) }
        if !batch.isEmpty { actions.insert(.send(batch, probe: probe), at: 0) }
        return actions
    }

    /// The claim's queries failed: how long to wait before the next (250 ms doubling to 5 s).
    mutating func claimFailed() -> Duration {
        databaseFailures += 1
        return Self.databaseBackoff(failures: databaseFailures)
    }

    static func databaseBackoff(failures: Int) -> Duration {
        .milliseconds(min(250 * (1 << min(failures, 5)), 5000))
    }

    // MARK: Answers

    /// One delivery's send ended: what is written, counted, logged, paused and failed.
    mutating func answered(_ attempt: Attempt, now: ContinuousClock.Instant, date: Date = Date()) -> [Action] {
        running -= 1
        var write = Outbox.Batch()
        var actions: [Action] = []
        decide(attempt, now: now, date: date, write: &write, actions: &actions)
        if !write.isEmpty { actions.append(.write(write)) }
        return actions
    }

    private mutating func decide(_ attempt: Attempt, now: ContinuousClock.Instant, date: Date, write: inout Outbox.Batch,
                                 actions: inout [Action]) {
        let job = attempt.job
        let outcome: SendOutcome
        switch attempt.result {
        case .success(.answered(let answered, let elapsed)):
            outcome = answered
            if let elapsed {
                actions.append(.recordLatency(elapsed))
                reachability.answered()
            } else if attempt.probe {
                reachability.probeInconclusive()
            }
        case .success(.notSent(let reason, let unreachable)):
            switch reachability.notSent(unreachable: unreachable, probe: attempt.probe, now: now) {
            case .retry(let at):
                // Nothing reached FCM: no attempt is spent; the delivery waits for the breaker.
                record(DeliveryQueue.Result(attempt.claimed, status: "pending", errorCode: unreachable ? "FCM_UNREACHABLE" : "NOT_SENT",
                                            errorMessage: String(reason.prefix(500)), messageID: nil, attempted: false,
                                            nextAttempt: date.addingTimeInterval(DeliveryPolicy.seconds(at - now))), into: &write)
                actions.append(.countSend(app: job.appCode, outcome: "not_sent"))
            case .giveUp(let bound):
                let message = "FCM unreachable for over \(bound.components.seconds) s: \(reason)"
                settle(attempt.claimed, job: job, status: "failed", code: "FCM_UNREACHABLE", message: message, into: &write, actions: &actions,
                       now: date)
                failJob(job.id, "app \(job.appCode): \(message)", into: &write)
            }
            return
        case .failure(let error) where error.isPermanent:
            if attempt.probe { reachability.probeInconclusive() }
            let reason = "app \(job.appCode): \(error)"
            settle(attempt.claimed, job: job, status: "failed", code: error.errorCode, message: reason, into: &write, actions: &actions, now: date)
            failJob(job.id, reason, into: &write)
            return
        case .failure(let error):
            if attempt.probe { reachability.probeInconclusive() }
            // Nothing reached FCM: no attempt is spent. The delivery and the app wait for the
            // token endpoint, whose unavailability the token cache backs off from.
            let wait = if case .transient(_, let retryAfter?) = error { retryAfter } else { Duration.seconds(1) }
            record(DeliveryQueue.Result(attempt.claimed, status: "pending", errorCode: "OAUTH_UNAVAILABLE",
                                        errorMessage: "app \(job.appCode): \(error)", messageID: nil, attempted: false,
                                        nextAttempt: date.addingTimeInterval(DeliveryPolicy.seconds(wait))), into: &write)
            pause(app: job.appID, for: wait, now: now)
            actions.append(.countSend(app: job.appCode, outcome: "retry"))
            return
        }
        let decision = policy.decide(outcome, for: attempt.claimed, job: job, now: date)
        record(decision.result, into: &write)
        if let deactivate = decision.deactivate {
            write.deactivations.append(deactivate)
            actions.append(.log(.info, "device deactivated", [
                "push.app": "\(job.appCode)", "push.device_id": "\(deactivate.deviceID)", "push.reason": "\(deactivate.reason)",
                "push.token": "\(maskedToken(attempt.claimed.token))",
            ]))
        }
        if let wait = decision.pauseApp {
            pause(app: job.appID, for: wait, now: now)
            actions.append(.log(.warning, "FCM quota exceeded, slowing the app down", ["push.app": "\(job.appCode)", "push.pause": "\(wait)"]))
        }
        if let proved = decision.proved { write.provenProjects.append(proved) }
        if let warning = decision.warning { actions.append(.log(.warning, warning, ["push.job_id": "\(job.id)"])) }
        if let reason = decision.failJob { failJob(job.id, reason, into: &write) }
        let counted = if case .noAnswer = outcome { "no_answer" } else if decision.result.status == "pending" { "retry" }
            else { decision.result.errorCode ?? decision.result.status }
        actions.append(.countSend(app: job.appCode, outcome: counted))
    }

    // MARK: Recording

    /// A later answer with a shorter wait does not cut an earlier pause short.
    private mutating func pause(app: Int64, for wait: Duration, now: ContinuousClock.Instant) {
        pausedApps[app] = max(pausedApps[app] ?? now, now + wait)
    }

    private mutating func failJob(_ job: Int64, _ reason: String, into write: inout Outbox.Batch) {
        guard failedJobs.insert(job).inserted else { return }
        write.jobFailures.append((job, reason))
    }

    /// A delivery settled without an FCM answer.
    private mutating func settle(_ delivery: DeliveryQueue.Claimed, job: DeliveryQueue.Job, status: String, code: String, message: String,
                                 into write: inout Outbox.Batch, actions: inout [Action], now: Date) {
        record(DeliveryQueue.Result(delivery, status: status, errorCode: code, errorMessage: message, messageID: nil, attempted: false,
                                    nextAttempt: now), into: &write)
        actions.append(.countSend(app: job.appCode, outcome: code))
    }

    /// A result for the writer, with the chunk it finishes, if any: a chunk is deleted in the
    /// statement that writes its last row, never before.
    private mutating func record(_ result: DeliveryQueue.Result, into write: inout Outbox.Batch) {
        if case .chunk(let chunk) = result.lease, let left = chunkDevicesLeft[chunk] {
            if left > 1 {
                chunkDevicesLeft[chunk] = left - 1
            } else {
                chunkDevicesLeft[chunk] = nil
                write.finishedChunks.append(chunk)
            }
        }
        write.results.append(result)
        write.touchedJobs.insert(result.jobID)
    }
}
