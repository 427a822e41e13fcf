import DeviceRegistry
import Foundation
import Logging
import WireFormats

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
        /// When the send left (the clock of the events that sent it): an answer to a send that
        /// left before a brown-out began does not end it.
        let sentAt: ContinuousClock.Instant
    }

    /// What the claim's queries remember between claims, kept here between them.
    struct ClaimCursor: Sendable {
        /// Due jobs with audience left to expand, oldest first, and when they were read.
        var audiences: [DeliveryQueue.Audience] = []
        var audiencesRead = ContinuousClock.Instant.now
        /// When to look for due deliveries again after a look that found too few.
        var nextDueClaim = ContinuousClock.Instant.now
        /// Claims that expanded audiences so far: whose turn it is among apps (AudienceShares).
        var expansions = 0
    }

    /// A claim for the I/O layer to run, concurrently with the sends.
    struct ClaimRequest: Sendable {
        /// New deliveries wanted; 0 when the claim only checks on jobs.
        let limit: Int
        /// Only this priority's audiences: a claim made beyond the usual holding, so that a
        /// high-priority job does not wait for room among the campaign deliveries held.
        var priority: JobPriority? = nil
        /// Read the due audiences again (a NOTIFY or the poll interval came since the last claim).
        var refreshAudiences = false
        let pausedApps: [Int64]
        let failedJobs: [Int64]
        /// Jobs read within `jobFreshness`: the others' details are read with the claim.
        let freshJobs: Set<Int64>
        /// Jobs of ready deliveries whose running status is to be confirmed.
        let recheckJobs: [Int64]
        let cursor: ClaimCursor
        /// How long to wait before reporting a failure, so that a database outage is not hammered.
        let backoff: Duration
        /// A probe's claim among the apps other than those FCM's brown-out was probed on (which
        /// `pausedApps` holds): when it finds nothing, every app has had its turn.
        var passesOverProbedApps = false
    }

    /// What a claim found.
    struct ClaimResult: Sendable {
        let claimed: [DeliveryQueue.Claimed]
        let loadedJobs: [DeliveryQueue.Job]
        /// Of `recheckJobs`, those still running.
        let runningJobs: Set<Int64>
        let cursor: ClaimCursor
        /// The claim stopped before its limit on purpose (to hand over high-priority deliveries
        /// at once): more may be found.
        var stoppedEarly = false
    }

    /// What the I/O layer carries out.
    enum Action {
        /// Send these, each delivery's attempt reported as its answer comes, with `probe` and
        /// `sentAt` as ``Attempt`` has them.
        case send([Claim], probe: Bool, sentAt: ContinuousClock.Instant)
        /// Run this claim and report how it ended.
        case claim(ClaimRequest)
        /// Hand to the writer.
        case write(Outbox.Batch)
        /// Claimed and waiting to be sent: their leases are kept alive until they go out.
        case keepLeased([DeliveryQueue.Lease])
        /// Settled without a send while waiting: their leases need no more keeping.
        case forgetLeased([DeliveryQueue.Lease])
        case log(Logger.Level, String, Logger.Metadata)
        case countSend(app: String, outcome: String, times: Int)
        case recordLatency(Duration)
    }

    let concurrency: Int
    /// Deliveries sent and not yet answered.
    private(set) var running = 0
    /// Claimed (leased to this worker) and not sent yet, by priority: each answer's slot is
    /// refilled from here at once, while the next claim runs.
    private var ready = ReadyLanes()
    var waiting: [DeliveryQueue.Claimed] { ready.all }
    private var claimInFlight = false
    /// A high-priority claim runs beside the usual one, so that it never waits for it.
    private var highClaimInFlight = false
    /// A hint came since the last high-priority claim: a high-priority job may be waiting.
    private var hintedSinceClaim = false
    /// A hint came since the last claim that read the due audiences.
    private var audiencesStale = true
    private var nextRecheck: ContinuousClock.Instant?
    /// Whether a claim may find something: after one that found less than it asked for, the next
    /// waits for a hint (NOTIFY, the poll interval) instead of following every answer.
    private var mayFindMore = true
    private var cursor = ClaimCursor()
    private(set) var reachability: FCMReachability
    /// Since when most of FCM's answers are server errors (the first start of one that started
    /// again soon after it ended), and when they became most this time; nil when they are not.
    private var brownOut: (since: ContinuousClock.Instant, began: ContinuousClock.Instant)?
    /// The last brown-out's start and end: one that starts again within `brownOutResumedWithin`
    /// is the same one, its bound counted from the first start (otherwise a brown-out that ends
    /// and starts over would hold deliveries for good).
    private var endedBrownOut: (since: ContinuousClock.Instant, ended: ContinuousClock.Instant)?
    private var fcmWide = FCMWideFailures()
    private var appServerFailures: [Int64: FCMServerFailures] = [:]
    /// Apps whose probe FCM answered with a server error in this brown-out: the next probes go
    /// to other apps' deliveries while there are any. Otherwise one failing app's retries, due
    /// first, would take every probe, and another app's sends, which FCM may take, would wait
    /// for the whole brown-out.
    private var probedApps: Set<Int64> = []
    /// Apps FCM answered with a server error in this brown-out, probe or not. Another app's first
    /// send does not wait for the breaker's next probe: it goes at once, as a probe of its own. A
    /// probe FCM takes puts these apps in brown-outs of their own.
    private var failedInBrownOut: Set<Int64> = []
    /// Apps that sent such a probe in this brown-out, whatever came of it: one each, so that a
    /// probe that reaches nobody (FCM unreachable as well, or silent) is not sent again and again
    /// past the breaker.
    private var earlyProbed: Set<Int64> = []

    /// An app whose sends FCM answers with server errors while it takes another app's.
    struct AppBrownOut {
        /// Its waits, as FCM's breaker's.
        var breaker: FCMReachability
        /// Its bound counts from here.
        let since: ContinuousClock.Instant
        /// When it began: answers to sends that left before do not end it.
        let began: ContinuousClock.Instant
        /// The end of the pause it set last.
        var pausedUntil: ContinuousClock.Instant?
        /// Where its probe is. When a pause ends one delivery goes; the app's others wait for
        /// its answer, unclaimed, rather than all going out to a project FCM may still fail.
        var probe = AppProbe.none
        /// Whether the operator was told. One begun when FCM took another app's probe is told
        /// only when FCM fails the app again: at the end of a brown-out FCM had for everyone,
        /// an app whose probe failed a minute before has no trouble of its own.
        var warned: Bool
    }

    enum AppProbe {
        /// None since the last server error: the breaker's wait decides.
        case none
        /// This delivery went and is not answered yet.
        case out(job: Int64, device: Int64)
        /// FCM took it: the app's deliveries go until its next server error.
        case taken
    }

    /// Apps in a brown-out of their own: each paused on a breaker of its own, the other apps
    /// sending on.
    private var appBrownOuts: [Int64: AppBrownOut] = [:]
    /// When each app's last brown-out started and ended, kept as ``endedBrownOut`` is.
    private var endedAppBrownOuts: [Int64: (since: ContinuousClock.Instant, ended: ContinuousClock.Instant)] = [:]
    private var policy: DeliveryPolicy
    private var jobs: [Int64: (job: DeliveryQueue.Job, loaded: ContinuousClock.Instant)] = [:]
    /// When each job was last seen running: a ready delivery goes out only while that is recent,
    /// so that a job cancelled or failed meanwhile sends nothing more.
    private var confirmedRunning: [Int64: ContinuousClock.Instant] = [:]
    private var pausedApps: [Int64: ContinuousClock.Instant] = [:]
    private(set) var failedJobs: Set<Int64> = []
    /// Jobs whose ending a NOTIFY announced, and when: none of their deliveries is sent, whatever
    /// a claim that read the job before its ending says.
    private var endedJobs: [Int64: ContinuousClock.Instant] = [:]
    /// Devices of each chunk held here whose result is not written yet: at zero the chunk is
    /// deleted with its last results.
    private var chunkDevicesLeft: [Int64: Int] = [:]
    private var databaseFailures = 0
    /// Sends written and never answered since the last line about them, the last one's reason,
    /// and when that line was.
    private var unansweredSinceLine = 0
    private var unansweredReason = ""
    private var unansweredLine: ContinuousClock.Instant?

    /// Credentials in `apps` are read again after this, so new ones take effect without a restart.
    static let jobFreshness = Duration.seconds(5)
    /// Jobs not claimed for this long are finished or paused: forgotten.
    static let jobMemory = Duration.seconds(60)
    /// A ready delivery goes out only if its job was seen running this recently.
    static let runningFreshness = Duration.milliseconds(100)
    /// Beside an app's brown-out, another app's server errors this many in a row are FCM's (nobody
    /// vouching): four of FCM's rare 503s in a row are not one device's bad luck.
    static let serverErrorsInARowBesideABrownOut = 4
    /// A brown-out that starts again this soon after its end goes on: no longer than the
    /// breaker's longest wait, so that brown-outs minutes apart are each bounded on their own.
    static let brownOutResumedWithin = FCMReachability.longestWait
    /// Unanswered sends are logged at most this often: a dead connection loses hundreds at once.
    static let unansweredLineInterval = Duration.seconds(60)

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

    // MARK: Claiming and refilling

    /// After the events that woke the loop: what to send from the ready deliveries into the free
    /// slots, whether to claim, and whether the loop is done (stopping, nothing in flight).
    mutating func poll(now: ContinuousClock.Instant, stopping: Bool, date: Date = Date()) -> (actions: [Action], done: Bool) {
        var actions: [Action] = []
        // Those held back since the last line are told once its minute is over, or at a stop.
        if unansweredSinceLine > 0, stopping || unansweredLine.map({ now - $0 >= Self.unansweredLineInterval }) ?? true {
            logUnanswered(now: now, into: &actions)
        }
        if stopping { return (actions, running == 0 && !claimInFlight && !highClaimInFlight) }
        let admission = reachability.admission(now: now)
        // During FCM's brown-out, with nothing in flight, an app FCM has not failed in it sends
        // one delivery as a probe without waiting for the breaker: a user's push of a project FCM
        // takes would otherwise wait up to a minute for another project's trouble.
        let early = admission == .closed && brownOut != nil && running == 0
        guard admission != .closed || early else { return (actions, false) }
        let passedOver: Set<Int64> =
            if early {
                failedInBrownOut.union(appBrownOuts.keys).union(earlyProbed)
            } else {
                admission == .probe && brownOut != nil ? probedApps : []
            }
        let probe = admission == .probe || early
        let stale = refill(probe: probe, passingOver: passedOver, now: now, date: date, into: &actions)
        if early {
            for case .send(let claims, _, _) in actions { earlyProbed.formUnion(claims.map(\.job.appID)) }
        }
        let held = running + ready.count
        // Claims are large (half the capacity at least: each expansion statement plans for
        // ~0.4 ms besides its rows) and start while half a capacity's worth is still ready, so
        // that the slots keep being refilled while the claim runs.
        let wanted: Int
        if probe {
            // No probe went: nothing ready to send but the passed-over apps'.
            wanted = mayFindMore && running == 0 && !stale ? 1 : 0
        } else {
            wanted = mayFindMore && held <= concurrency + concurrency / 2 ? 2 * concurrency - held : 0
        }
        // A job check at most every tenth of the freshness, whatever keeps the ready ones waiting.
        let recheck = stale && running < concurrency && nextRecheck.map { now >= $0 } ?? true
        let usual = !claimInFlight && (wanted > 0 || recheck)
        let high = hintedSinceClaim && admission == .unrestricted && !highClaimInFlight
        // What both requests carry, worked out only when one goes (the loop polls per event).
        guard usual || high else { return (actions, false) }
        let paused = pausedApps(now: now)
        let passesOver = wanted > 0 && !passedOver.isEmpty
        // An early probe's claim that finds nothing leaves the breaker's probes as they were.
        let rotates = passesOver && !early
        let failed = Array(failedJobs)
        let freshJobs = Set(jobs.filter { now - $0.value.loaded <= Self.jobFreshness }.keys)
        let backoff = Self.databaseBackoff(failures: databaseFailures + 1)
        if usual {
            claimInFlight = true
            nextRecheck = now + Self.runningFreshness / 10
            var request = ClaimRequest(
                limit: wanted, pausedApps: passesOver ? Array(passedOver.union(paused)).sorted() : paused, failedJobs: failed,
                freshJobs: freshJobs, recheckJobs: Array(Set(ready.all.map(\.jobID))).sorted(), cursor: cursor, backoff: backoff,
                passesOverProbedApps: rotates)
            if wanted > 0 {
                // It expands high-priority audiences first, and returns with them at once.
                request.refreshAudiences = audiencesStale
                audiencesStale = false
            }
            actions.append(.claim(request))
        }
        if high {
            // After a hint, high-priority audiences are claimed beside the usual claim (which
            // first takes due retries and expired leases), a little past the usual holding, so
            // that they go out with the next free slots.
            highClaimInFlight = true
            hintedSinceClaim = false
            actions.append(
                .claim(
                    ClaimRequest(
                        limit: Self.urgentClaim(concurrency: concurrency), priority: .high, pausedApps: paused,
                        failedJobs: failed, freshJobs: freshJobs, recheckJobs: [], cursor: cursor, backoff: backoff)))
        }
        return (actions, false)
    }

    /// How many high-priority deliveries a claim beyond the usual holding may take.
    static func urgentClaim(concurrency: Int) -> Int {
        max(DeliveryQueue.chunkSize, concurrency / 4)
    }

    /// Fills free slots from the ready deliveries, by priority and then their jobs' turns, while their
    /// job was seen running lately; settles those that need no send (among them those past
    /// their job's expiry). A probe is the first not of an app in `passedOver`. True when it
    /// stopped at one whose job is to be confirmed first.
    private mutating func refill(
        probe: Bool, passingOver passedOver: Set<Int64>, now: ContinuousClock.Instant, date: Date, into actions: inout [Action]
    ) -> Bool {
        var free = probe ? (running == 0 ? 1 : 0) : concurrency - running
        var batch: [Claim] = []
        var settled = Outbox.Batch()
        var forgotten: [DeliveryQueue.Lease] = []
        var stale = false
        func nextReady() -> (delivery: DeliveryQueue.Claimed, position: ReadyLanes.Position)? {
            guard probe else { return ready.next() }
            return ready.first(passingOver: { job in jobs[job].map { passedOver.contains($0.job.appID) } ?? false })
        }
        while free > 0, let (delivery, position) = nextReady() {
            guard let seen = confirmedRunning[delivery.jobID], now - seen <= Self.runningFreshness, let job = jobs[delivery.jobID]?.job
            else {
                stale = true
                break
            }
            ready.remove(position)
            if !delivery.jobRunning {
                // Recorded as a retry without an attempt: the write turns it into the job's ending.
                settle(
                    delivery, job: job, status: .pending, code: .jobEnded,
                    message: delivery.mayHaveBeenSent ? JobDirectory.heldByAStoppedWorker : "", into: &settled, actions: &actions, now: date
                )
            } else if let expiry = job.expiresAt, date >= expiry {
                settle(
                    delivery, job: job, status: .skipped, code: .expired,
                    message: "expired at \(expiry.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true))) before it was sent",
                    into: &settled, actions: &actions, now: date)
            } else if !delivery.deviceActive {
                settle(
                    delivery, job: job, status: .skipped, code: .deviceInactive, message: "the device was deactivated before its turn",
                    into: &settled, actions: &actions, now: date)
            } else if let account = job.account {
                guard sendsNow(delivery, app: job.appID, now: now) else {
                    // Its app's probe is out, or its wait not over: back in the queue until its
                    // pause ends, or for a second while the probe is out (its answer sets the
                    // next pause; this worker leaves the app out of claims meanwhile).
                    let until = max(pausedApps[job.appID] ?? now, now + FCMReachability.shortestWait)
                    record(
                        DeliveryQueue.Result(
                            delivery, status: .pending, errorCode: .notSent, errorMessage: Self.heldForTheAppsProbe, messageID: nil,
                            attempted: false, nextAttempt: date.addingTimeInterval((until - now).inSeconds)),
                        into: &settled)
                    forgotten.append(delivery.lease)
                    continue
                }
                batch.append((delivery, job, account))
                free -= 1
                continue
            } else {
                let reason = "app \(job.appCode): no FCM credentials (pushctl app set-credentials --code \(job.appCode))"
                settle(
                    delivery, job: job, status: .failed, code: .noCredentials, message: reason, into: &settled, actions: &actions, now: date
                )
                failJob(job.id, reason, into: &settled)
            }
            forgotten.append(delivery.lease)
        }
        running += batch.count
        if probe && !batch.isEmpty { reachability.probeSent() }
        if !batch.isEmpty { actions.append(.send(batch, probe: probe, sentAt: now)) }
        if !settled.isEmpty { actions.append(.write(settled)) }
        if !forgotten.isEmpty { actions.append(.forgetLeased(forgotten)) }
        return stale
    }

    static let heldForTheAppsProbe =
        "held back: FCM answered the app's sends with server errors; they go again once it takes the app's probe"

    /// Whether `delivery` of `app` goes out now: always, unless the app is in a brown-out of its
    /// own, where one delivery goes as its probe once its wait is over (which makes it the
    /// probe), none while that probe is out or the wait is not over, and all once FCM took the
    /// probe or past the brown-out's bound (to fail with their jobs if FCM still fails the app).
    private mutating func sendsNow(_ delivery: DeliveryQueue.Claimed, app: Int64, now: ContinuousClock.Instant) -> Bool {
        guard var brownOut = appBrownOuts[app] else { return true }
        switch admission(brownOut, app: app, now: now) {
        case .unrestricted:
            return true
        case .closed:
            return false
        case .probe:
            brownOut.breaker.probeSent()
            brownOut.probe = .out(job: delivery.jobID, device: delivery.deviceID)
            appBrownOuts[app] = brownOut
            return true
        }
    }

    /// What `app`'s brown-out lets out now. Its breaker's bound counts from the breaker's first
    /// opening, which may come long after the brown-out's start (one begun on FCM's, or started
    /// again soon after it ended): the brown-out's own bound is the one that holds.
    private func admission(_ brownOut: AppBrownOut, app: Int64, now: ContinuousClock.Instant) -> FCMReachability.Admission {
        if case .taken = brownOut.probe { return .unrestricted }
        if now - brownOut.since >= reachability.longestOutage { return .unrestricted }
        // A pause longer than the breaker's wait (FCM's Retry-After) holds the probe back too.
        if let until = pausedApps[app], until > now { return .closed }
        return brownOut.breaker.admission(now: now)
    }

    /// These jobs ended (cancelled or failed; a NOTIFY at the ending's commit): their ready
    /// deliveries are recorded as the ending says instead of sent, as are those a claim begun
    /// before the ending brings, rather than going out until the next check of their job.
    mutating func jobsEnded(_ ids: [Int64], now: ContinuousClock.Instant) {
        guard !ids.isEmpty else { return }
        for id in ids {
            endedJobs[id] = now
            if jobs[id] != nil { confirmedRunning[id] = now }
        }
        ready.markEnded(jobs: Set(ids))
    }

    /// A NOTIFY, the poll interval or a shutdown: a claim may find something again.
    mutating func hinted() {
        mayFindMore = true
        hintedSinceClaim = true
        audiencesStale = true
    }

    /// Apps whose deliveries are not claimed now (FCM's quota, an unavailable token endpoint, a
    /// brown-out of their own while it holds them: its wait, and its probe's round trip).
    mutating func pausedApps(now: ContinuousClock.Instant) -> [Int64] {
        pausedApps = pausedApps.filter { $0.value > now }
        let waiting = appBrownOuts.filter { admission($0.value, app: $0.key, now: now) == .closed }.keys
        return Array(Set(pausedApps.keys).union(waiting)).sorted()
    }

    /// The claim `request` found `result`: its deliveries join the ready ones (and go out as
    /// the next poll refills the slots); ready deliveries of jobs that ended are marked so.
    mutating func claimed(_ result: ClaimResult, for request: ClaimRequest, now: ContinuousClock.Instant) -> [Action] {
        databaseFailures = 0
        if request.priority == nil {
            claimInFlight = false
            cursor = result.cursor
            if request.limit > 0 { mayFindMore = result.claimed.count >= request.limit || result.stoppedEarly }
            if request.passesOverProbedApps && result.claimed.isEmpty {
                // No other app has anything to send: the next probe may go to one probed before,
                // among the due deliveries this claim found none of.
                probedApps = []
                mayFindMore = true
                cursor.nextDueClaim = now
            }
        } else {
            // A claim of high priority only says nothing about the rest, and leaves the cursor.
            highClaimInFlight = false
        }
        for job in result.loadedJobs { jobs[job.id] = (job, now) }
        // A long-running worker keeps only what it is working on.
        for (app, ended) in endedAppBrownOuts where now - ended.ended > Self.brownOutResumedWithin { endedAppBrownOuts[app] = nil }
        for (app, failures) in appServerFailures where failures.lastAnswer.map({ now - $0 > FCMServerFailures.forgetAfter }) ?? true {
            appServerFailures[app] = nil
            appBrownOuts[app] = nil
            endedAppBrownOuts[app] = nil
        }
        for (id, ended) in endedJobs where now - ended > Self.jobMemory { endedJobs[id] = nil }
        for (id, entry) in jobs where now - entry.loaded > Self.jobMemory {
            jobs[id] = nil
            confirmedRunning[id] = nil
            failedJobs.remove(id)
            policy.forget(job: id)
        }
        for job in request.recheckJobs {
            if result.runningJobs.contains(job) && endedJobs[job] == nil { confirmedRunning[job] = now }
        }
        let ended = Set(request.recheckJobs).subtracting(result.runningJobs.subtracting(endedJobs.keys))
        if !ended.isEmpty {
            ready.markEnded(jobs: ended)
            for job in ended { confirmedRunning[job] = now }
        }
        for delivery in result.claimed {
            if case .chunk(let chunk) = delivery.lease { chunkDevicesLeft[chunk, default: 0] += 1 }
            // The claim's SQL read the job's status with the delivery.
            if jobs[delivery.jobID] != nil { confirmedRunning[delivery.jobID] = now }
            ready.append(
                endedJobs[delivery.jobID] == nil ? delivery : delivery.ended, priority: jobs[delivery.jobID]?.job.priority ?? .normal)
        }
        return result.claimed.isEmpty ? [] : [.keepLeased(result.claimed.map(\.lease))]
    }

    /// The claim's queries failed (and the I/O layer waited `request.backoff`).
    mutating func claimFailed(_ request: ClaimRequest) {
        if request.priority == nil { claimInFlight = false } else { highClaimInFlight = false }
        databaseFailures += 1
    }

    /// 250 ms doubling to 5 s.
    static func databaseBackoff(failures: Int) -> Duration {
        .milliseconds(min(250 * (1 << min(failures, 5)), 5000))
    }

    // MARK: Answers

    /// One delivery's send ended: what is written, counted, logged, paused and failed.
    mutating func answered(_ attempt: Attempt, now: ContinuousClock.Instant, date: Date = Date()) -> [Action] {
        answered([attempt], now: now, date: date)
    }

    /// The sends of `attempts` ended: one write and one count per outcome for all of them.
    mutating func answered(_ attempts: [Attempt], now: ContinuousClock.Instant, date: Date = Date()) -> [Action] {
        running -= attempts.count
        var write = Outbox.Batch()
        // Someone waits for a high-priority result: written apart, at once, not with the rest.
        var urgent = Outbox.Batch(urgent: true)
        var actions: [Action] = []
        for attempt in attempts {
            if attempt.job.priority == .high {
                decide(attempt, now: now, date: date, write: &urgent, actions: &actions)
            } else {
                decide(attempt, now: now, date: date, write: &write, actions: &actions)
            }
        }
        if !write.isEmpty { actions.append(.write(write)) }
        if !urgent.isEmpty { actions.append(.write(urgent)) }
        return Self.countedTogether(actions)
    }

    /// Counts of one app and outcome as one action (each is a lock and a counter update).
    private static func countedTogether(_ actions: [Action]) -> [Action] {
        var counts: [String: [String: Int]] = [:]
        var others: [Action] = []
        for action in actions {
            if case .countSend(let app, let outcome, let times) = action {
                counts[app, default: [:]][outcome, default: 0] += times
            } else {
                others.append(action)
            }
        }
        for (app, outcomes) in counts.sorted(by: { $0.key < $1.key }) {
            for (outcome, times) in outcomes.sorted(by: { $0.key < $1.key }) {
                others.append(.countSend(app: app, outcome: outcome, times: times))
            }
        }
        return others
    }

    private mutating func decide(
        _ attempt: Attempt, now: ContinuousClock.Instant, date: Date, write: inout Outbox.Batch,
        actions: inout [Action]
    ) {
        let job = attempt.job
        // The app's probe came back: its breaker lets the next one go unless what it says
        // decides otherwise below (a server error doubles the wait, FCM taking it opens the way).
        var appProbe = false
        if var brownOut = appBrownOuts[job.appID], case .out(attempt.claimed.jobID, attempt.claimed.deviceID) = brownOut.probe {
            appProbe = true
            brownOut.probe = .none
            brownOut.breaker.probeInconclusive()
            appBrownOuts[job.appID] = brownOut
        }
        let outcome: SendOutcome
        switch attempt.result {
        case .success(.answered(let answered, let elapsed)):
            outcome = answered
            let serverError = answered.isServerError
            if elapsed != nil {
                let app = job.appID
                let accepted = if case .sent = answered { true } else { false }
                let appFailing = appServerFailures[app, default: FCMServerFailures()].record(
                    serverError: serverError, accepted: accepted, now: now)
                if let brownOut = appBrownOuts[app] {
                    if serverError {
                        failingApp(attempt, answered, now: now, date: date, write: &write, actions: &actions)
                        return
                    }
                    if appFailing && appProbe {
                        // Taken, though most of its last answers were server errors: the app's
                        // deliveries go out, and their answers say whether it is back (its next
                        // server error doubles the wait, as its breaker keeps its failures).
                        appBrownOuts[app]?.probe = .taken
                    } else if !appFailing && attempt.sentAt >= brownOut.began {
                        appBrownOuts[app] = nil
                        endedAppBrownOuts[app] = (brownOut.since, now)
                        if let until = brownOut.pausedUntil, pausedApps[app] == until { pausedApps[app] = nil }
                        if brownOut.warned {
                            let outage = (now - brownOut.since).components.seconds
                            actions.append(
                                .log(
                                    .notice, "FCM answers the app's sends again; its sending resumes",
                                    ["push.app": "\(job.appCode)", "push.outage_seconds": "\(outage)"]))
                        }
                    }
                } else {
                    // Answers forgotten as too old end the brown-out they made, without a word.
                    if !fcmWide.record(app: app, serverError: serverError, now: now) { brownOut = nil }
                    if serverError, let window = appServerFailures[app] {
                        // FCM's trouble when it shows in this app's answers or the worker's,
                        // unless another app vouches for FCM. Beside an app's brown-out it shows in
                        // another app's server errors in a row before they are most of anything: a
                        // small app's few answers would spend their attempts first.
                        let failing =
                            appFailing || fcmWide.isFailing
                            || !appBrownOuts.isEmpty && window.serverErrorsInARow >= Self.serverErrorsInARowBesideABrownOut
                        if failing {
                            let vouched = anotherAppVouchesForFCM(besides: app, takenUntil: window.takenUntil, now: now)
                            if appFailing && vouched {
                                failingApp(attempt, answered, now: now, date: date, write: &write, actions: &actions)
                                // FCM takes another app's sends: a brown-out of FCM's this app's
                                // 503s began, before the other had answers enough to vouch, was
                                // this app's.
                                if let since = brownOut?.since, !fcmWide.isFailing {
                                    resumed(since: since, now: now, actions: &actions)
                                    reachability.answered()
                                }
                                return
                            }
                            if !vouched {
                                failingFCM(attempt, answered, now: now, date: date, write: &write, actions: &actions)
                                return
                            }
                        }
                    }
                }
            }
            if let elapsed {
                actions.append(.recordLatency(elapsed))
                if attempt.probe, case .sent = answered, let since = brownOut?.since {
                    // FCM took this app's probe after answering other apps' with server errors:
                    // their trouble may be their own. Each waits in a brown-out of its own, its
                    // answers left out of the worker's, rather than all of its due deliveries
                    // going out (and failing) each time another app's probe closes the breaker;
                    // it is told when FCM fails the app again.
                    for app in failedInBrownOut.sorted() where app != job.appID {
                        // Not answered for five minutes, what its answers said is forgotten (and
                        // kept out of the worker's): a brown-out begun now, counted from FCM's,
                        // would fail its next job at once for an old one.
                        guard let last = appServerFailures[app]?.lastAnswer, now - last <= FCMServerFailures.forgetAfter else {
                            fcmWide.leaveOut(app: app)
                            continue
                        }
                        var brownOut = appBrownOut(app, since: since, now: now, warning: nil, actions: &actions)
                        if case .retry(let at) = brownOut.breaker.notSent(unreachable: true, probe: false, now: now) {
                            pause(app: app, for: at - now, now: now)
                            brownOut.pausedUntil = pausedApps[app]
                        }
                        appBrownOuts[app] = brownOut
                    }
                    probedApps = []
                    failedInBrownOut = []
                }
                // An outage ends with any answer; a brown-out with an answer other than a server
                // error, to a send that left after it began, of an app not in a brown-out of its
                // own, once server errors are less than half of the worker's answers (or too few
                // to say). An answer to a send that left before says what FCM was: at the tipping
                // point, the sends in flight would end and start it again and again.
                let outageSince =
                    if let brownOut {
                        !serverError && attempt.sentAt >= brownOut.began && appBrownOuts[job.appID] == nil && !fcmWide.isFailing
                            ? brownOut.since : nil
                    } else {
                        reachability.unreachableSince
                    }
                if let since = outageSince { resumed(since: since, now: now, actions: &actions) }
                // During a brown-out only a probe's answer says FCM takes sends again: one sent
                // before the breaker opened would let every waiting delivery out for its 503.
                if brownOut == nil || attempt.probe { reachability.answered() }
            } else if attempt.probe {
                reachability.probeInconclusive()
            }
        case .success(.notSent(let reason, let unreachable)):
            let wasReachable = reachability.isReachable
            let verdict = reachability.notSent(unreachable: unreachable, probe: attempt.probe, now: now)
            if wasReachable && !reachability.isReachable {
                // The operator's one line for an outage; the deliveries say the rest.
                actions.append(
                    .log(
                        .warning, "FCM cannot be reached; sending waits for it (no attempts spent), probing from 1 s to a minute",
                        ["push.reason": "\(reason)"]))
            }
            switch verdict {
            case .retry(let at):
                // Nothing reached FCM: no attempt is spent; the delivery waits for the breaker.
                record(
                    DeliveryQueue.Result(
                        attempt.claimed, status: .pending, errorCode: unreachable ? .fcmUnreachable : .notSent,
                        errorMessage: reason, messageID: nil, attempted: false,
                        nextAttempt: date.addingTimeInterval((at - now).inSeconds)), into: &write)
                actions.append(.countSend(app: job.appCode, outcome: "not_sent", times: 1))
            case .giveUp(let bound):
                let message = "FCM unreachable for over \(bound.components.seconds) s: \(reason)"
                settle(
                    attempt.claimed, job: job, status: .failed, code: .fcmUnreachable, message: message, into: &write, actions: &actions,
                    now: date)
                failJob(job.id, "app \(job.appCode): \(message)", into: &write)
            }
            return
        case .failure(let error) where error.isPermanent:
            if attempt.probe { reachability.probeInconclusive() }
            let reason = "app \(job.appCode): \(error)"
            settle(
                attempt.claimed, job: job, status: .failed, code: error.errorCode, message: reason, into: &write, actions: &actions,
                now: date)
            failJob(job.id, reason, into: &write)
            return
        case .failure(let error):
            if attempt.probe { reachability.probeInconclusive() }
            // Nothing reached FCM: no attempt is spent. The delivery and the app wait for the
            // token endpoint, whose unavailability the token cache backs off from.
            let wait = if case .transient(_, let retryAfter?) = error { retryAfter } else { Duration.seconds(1) }
            record(
                DeliveryQueue.Result(
                    attempt.claimed, status: .pending, errorCode: .oauthUnavailable,
                    errorMessage: "app \(job.appCode): \(error)", messageID: nil, attempted: false,
                    nextAttempt: date.addingTimeInterval(wait.inSeconds)), into: &write)
            if pause(app: job.appID, for: wait, now: now) {
                actions.append(
                    .log(
                        .warning, "Google's token endpoint unavailable; the app's sends wait for it",
                        ["push.app": "\(job.appCode)", "push.reason": "\(error)", "push.pause": "\(wait.toTheMillisecond)"]))
            }
            // A wait, as `not_sent` is FCM's: not `retry`, which counts FCM's answers.
            actions.append(.countSend(app: job.appCode, outcome: "oauth_unavailable", times: 1))
            return
        }
        let decision = policy.decide(outcome, for: attempt.claimed, job: job, now: date)
        record(decision.result, into: &write)
        if let deactivate = decision.deactivate {
            write.deactivations.append(deactivate)
            actions.append(
                .log(
                    .info, "device deactivated",
                    [
                        "push.app": "\(job.appCode)", "push.device_id": "\(deactivate.deviceID)", "push.reason": "\(deactivate.reason)",
                        "push.token": "\(maskedToken(attempt.claimed.token))",
                    ]))
        }
        if let wait = decision.pauseApp, pause(app: job.appID, for: wait, now: now) {
            actions.append(
                .log(
                    .warning, "FCM quota exceeded, slowing the app down",
                    ["push.app": "\(job.appCode)", "push.pause": "\(wait.toTheMillisecond)"]))
        }
        if let proved = decision.proved { write.provenProjects.append(proved) }
        if let warning = decision.warning { actions.append(.log(.warning, warning, ["push.job_id": "\(job.id)"])) }
        if let reason = decision.failJob { failJob(job.id, reason, into: &write) }
        if case .noAnswer(let reason) = outcome { noteUnanswered(reason: reason, now: now, actions: &actions) }
        let counted =
            if case .noAnswer = outcome { "no_answer" } else if case .sentUnreadable = outcome {
                "sent_unreadable"
            } else if decision.result.status == .pending { "retry" } else {
                decision.result.errorCode.map(DispatchMetrics.outcome) ?? decision.result.status.rawValue
            }
        actions.append(.countSend(app: job.appCode, outcome: counted, times: 1))
    }

    /// FCM takes sends again after an outage or a brown-out that began at `since`: the operator's
    /// line, and the brown-out's start and end kept for one that starts again soon.
    private mutating func resumed(since: ContinuousClock.Instant, now: ContinuousClock.Instant, actions: inout [Action]) {
        let outage = (now - since).components.seconds
        actions.append(.log(.notice, "FCM answers again; sending resumes", ["push.outage_seconds": "\(outage)"]))
        if brownOut != nil { endedBrownOut = (since, now) }
        brownOut = nil
    }

    /// A server error while most of FCM's answers are: FCM did not take the message, so the
    /// delivery waits for the breaker as when FCM cannot be reached, spending no attempt.
    private mutating func failingFCM(
        _ attempt: Attempt, _ answered: SendOutcome, now: ContinuousClock.Instant, date: Date, write: inout Outbox.Batch,
        actions: inout [Action]
    ) {
        guard case .transient(let code, let message, let retryAfter, _) = answered else { return }
        let verdict = reachability.notSent(unreachable: true, probe: attempt.probe, now: now)
        if brownOut == nil {
            probedApps = []
            failedInBrownOut = []
            earlyProbed = []
            let since = endedBrownOut.flatMap { now - $0.ended <= Self.brownOutResumedWithin ? $0.since : nil } ?? now
            brownOut = (since, now)
            actions.append(
                .log(
                    .warning,
                    "FCM answers most sends with server errors; sending waits for it (no attempts spent), probing from 1 s to a minute",
                    ["push.reason": "\(code): \(message)"]))
        }
        if attempt.probe { probedApps.insert(attempt.job.appID) }
        failedInBrownOut.insert(attempt.job.appID)
        // The breaker closes and opens again during a brown-out: its bound counts from the start.
        _ = hold(
            attempt, code, message, retryAfter: retryAfter, verdict: verdict, brownOutSince: brownOut?.since ?? now,
            answered: "server errors", now: now, date: date, write: &write, actions: &actions)
    }

    /// A server error in a brown-out that began at `since`: pending without an attempt until the
    /// breaker's `verdict` (or FCM's Retry-After) lets it go again, or, past the longest outage,
    /// failed with its job, as FCM `answered` it for that long. The wait when it is held.
    private mutating func hold(
        _ attempt: Attempt, _ code: DeliveryErrorCode, _ message: String, retryAfter: Duration?, verdict: FCMReachability.Verdict,
        brownOutSince since: ContinuousClock.Instant, answered: String, now: ContinuousClock.Instant, date: Date,
        write: inout Outbox.Batch, actions: inout [Action]
    ) -> Duration? {
        let job = attempt.job
        let bound = reachability.longestOutage
        switch now - since >= bound ? .giveUp(outageLongerThan: bound) : verdict {
        case .retry(let at):
            // FCM's Retry-After, held to the breaker's longest wait: a brown-out is probed (and
            // not forgotten, FCMServerFailures.forgetAfter) at least that often.
            let wait = max(at - now, min(retryAfter ?? .zero, FCMReachability.longestWait))
            record(
                DeliveryQueue.Result(
                    attempt.claimed, status: .pending, errorCode: code, errorMessage: message, messageID: nil, attempted: false,
                    nextAttempt: date.addingTimeInterval(wait.inSeconds)), into: &write)
            actions.append(.countSend(app: job.appCode, outcome: "retry", times: 1))
            return wait
        case .giveUp(let bound):
            let reason = "FCM answered \(answered) for over \(bound.components.seconds) s: \(code): \(message)"
            settle(attempt.claimed, job: job, status: .failed, code: code, message: reason, into: &write, actions: &actions, now: date)
            failJob(job.id, "app \(job.appCode): \(reason)", into: &write)
            return nil
        }
    }

    /// Whether FCM takes the sends of an app other than `app` (which it may have stopped taking
    /// since `takenUntil`) just now: ``FCMServerFailures/vouchesForFCM(besideAnAppTakenUntil:now:)``.
    private func anotherAppVouchesForFCM(besides app: Int64, takenUntil: ContinuousClock.Instant?, now: ContinuousClock.Instant) -> Bool {
        appServerFailures.contains { $0.key != app && $0.value.vouchesForFCM(besideAnAppTakenUntil: takenUntil, now: now) }
    }

    /// A server error while most of this app's answers are, and FCM takes another app's sends: its
    /// project's trouble, not FCM's. The delivery waits without spending an attempt, and the app
    /// is paused (1 s doubling to a minute, or FCM's Retry-After held to that) while the others
    /// send on; after the longest outage its jobs fail. When a pause ends, one of its deliveries
    /// goes as a probe and the rest wait for its answer (`sendsNow`): a project FCM still fails
    /// gets one request a pause, not its whole backlog.
    private mutating func failingApp(
        _ attempt: Attempt, _ answered: SendOutcome, now: ContinuousClock.Instant, date: Date, write: inout Outbox.Batch,
        actions: inout [Action]
    ) {
        guard case .transient(let code, let message, let retryAfter, _) = answered else { return }
        let job = attempt.job
        // A probe of FCM's breaker that found this app's trouble says nothing of FCM's: another goes.
        if attempt.probe { reachability.probeInconclusive() }
        let app = job.appID
        var brownOut = appBrownOut(
            app, since: now, now: now, warning: (appCode: job.appCode, reason: "\(code): \(message)"), actions: &actions)
        if case .taken = brownOut.probe { brownOut.probe = .none }
        let verdict = brownOut.breaker.notSent(unreachable: true, probe: false, now: now)
        if let wait = hold(
            attempt, code, message, retryAfter: retryAfter, verdict: verdict, brownOutSince: brownOut.since,
            answered: "the app's sends with server errors", now: now, date: date, write: &write, actions: &actions)
        {
            pause(app: app, for: wait, now: now)
            brownOut.pausedUntil = pausedApps[app]
        }
        appBrownOuts[app] = brownOut
    }

    /// `app`'s brown-out: the one it is in, or one begun at `since` (or at its last one's start,
    /// when that ended within ``brownOutResumedWithin``), its answers left out of the worker's
    /// from now on; told once, with the first `warning` given (the app's code and FCM's error).
    private mutating func appBrownOut(
        _ app: Int64, since: ContinuousClock.Instant, now: ContinuousClock.Instant, warning: (appCode: String, reason: String)?,
        actions: inout [Action]
    ) -> AppBrownOut {
        var brownOut: AppBrownOut
        if let current = appBrownOuts[app] {
            brownOut = current
        } else {
            fcmWide.leaveOut(app: app)
            let resumed = endedAppBrownOuts[app].flatMap { now - $0.ended <= Self.brownOutResumedWithin ? $0.since : nil }
            brownOut = AppBrownOut(breaker: reachability.closed, since: min(resumed ?? since, since), began: now, warned: false)
        }
        if let warning, !brownOut.warned {
            brownOut.warned = true
            actions.append(
                .log(
                    .warning,
                    "FCM answers most of the app's sends with server errors and other apps' well; the app's sending waits (no attempts spent), the others go on",
                    ["push.app": "\(warning.appCode)", "push.reason": "\(warning.reason)"]))
        }
        return brownOut
    }

    /// The one outcome that may reach a phone twice (the retry of a send FCM may have taken)
    /// gets a line of its own, with how many there were since the previous line.
    private mutating func noteUnanswered(reason: String, now: ContinuousClock.Instant, actions: inout [Action]) {
        unansweredSinceLine += 1
        unansweredReason = reason
        if let last = unansweredLine, now - last < Self.unansweredLineInterval { return }
        logUnanswered(now: now, into: &actions)
    }

    private mutating func logUnanswered(now: ContinuousClock.Instant, into actions: inout [Action]) {
        actions.append(
            .log(
                .warning, "FCM did not answer sends written to it; each spends an attempt and is retried, so a phone may get it twice",
                ["push.reason": "\(unansweredReason)", "push.unanswered": "\(unansweredSinceLine)"]))
        unansweredLine = now
        unansweredSinceLine = 0
    }

    // MARK: Recording

    /// A later answer with a shorter wait does not cut an earlier pause short.
    /// True when the app was not paused already: a campaign's sends answered 429 together
    /// pause it once, not once each.
    @discardableResult
    private mutating func pause(app: Int64, for wait: Duration, now: ContinuousClock.Instant) -> Bool {
        let until = pausedApps[app] ?? now
        pausedApps[app] = max(until, now + wait)
        return until <= now
    }

    private mutating func failJob(_ job: Int64, _ reason: String, into write: inout Outbox.Batch) {
        guard failedJobs.insert(job).inserted else { return }
        write.jobFailures.append((job, reason))
    }

    /// A delivery settled without an FCM answer.
    private mutating func settle(
        _ delivery: DeliveryQueue.Claimed, job: DeliveryQueue.Job, status: DeliveryStatus, code: DeliveryErrorCode, message: String,
        into write: inout Outbox.Batch, actions: inout [Action], now: Date
    ) {
        record(
            DeliveryQueue.Result(
                delivery, status: status, errorCode: code, errorMessage: message, messageID: nil, attempted: false,
                nextAttempt: now), into: &write)
        actions.append(.countSend(app: job.appCode, outcome: code.rawValue, times: 1))
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
