/// Whether FCM can be reached, as the sends find out: a circuit breaker with probes. A request
/// that could not reach FCM (no connection, one lost before anything was written) opens it; the
/// send loop then sends nothing until a wait (1 s doubling to a minute, jittered) has passed,
/// then one delivery as a probe. Any answer from FCM closes it. Deliveries that could not be
/// sent spend no attempt and wait for the breaker, up to `longestOutage`: after that they fail
/// (and their jobs with them) until FCM answers again, so that waiting is bounded in time.
///
/// A state machine: events in, decisions out, no clock or I/O of its own.
struct FCMReachability {
    /// What the send loop may claim now.
    enum Admission: Equatable {
        /// As much as it has room for.
        case unrestricted
        /// One delivery, whose fate says whether FCM is back.
        case probe
        /// Nothing: a probe is on its way, or the wait has not passed.
        case closed
    }

    /// What becomes of a delivery that could not be sent.
    enum Verdict: Equatable {
        /// Pending, without spending an attempt, until then.
        case retry(at: ContinuousClock.Instant)
        /// Failed: FCM has been unreachable for longer than a delivery may wait.
        case giveUp(outageLongerThan: Duration)
    }

    private enum State {
        case reachable
        case unreachable(since: ContinuousClock.Instant, failures: Int, retryAt: ContinuousClock.Instant, probing: Bool)
    }

    private var state = State.reachable
    let longestOutage: Duration
    private let jitter: () -> Double

    static let shortestWait = Duration.seconds(1)
    static let longestWait = Duration.seconds(60)
    /// What FCM did this long ago, with nothing tried since, says nothing about now: a worker
    /// idle for hours after an outage (its jobs cancelled) starts a new one at its next failure
    /// instead of failing the new job at once for the old outage's length. Well past the
    /// longest wait, so that an outage being probed is kept.
    static let forgetAfter = Duration.seconds(300)

    /// `jitter` scales each wait (by 0.75 to 1.25 unless given), so that workers that lost FCM
    /// together do not all come back in the same instant.
    init(longestOutage: Duration, jitter: @escaping () -> Double = { Double.random(in: 0.75...1.25) }) {
        self.longestOutage = longestOutage
        self.jitter = jitter
    }

    /// The same breaker (its bound and jitter), closed: for one app's brown-out, backed off and
    /// bounded as FCM's.
    var closed: FCMReachability {
        var copy = self
        copy.state = .reachable
        return copy
    }

    var isReachable: Bool {
        if case .reachable = state { return true }
        return false
    }

    /// When the breaker opened; nil while FCM answers.
    var unreachableSince: ContinuousClock.Instant? {
        if case .unreachable(let since, _, _, _) = state { return since }
        return nil
    }

    func admission(now: ContinuousClock.Instant) -> Admission {
        guard case .unreachable(let since, _, let retryAt, let probing) = state else { return .unrestricted }
        guard !probing && now >= retryAt else { return .closed }
        // Past the bound every claimed delivery fails at once if FCM is still away: a probe at a
        // time would take hours to end the jobs that waited.
        return now - since >= longestOutage && now - retryAt <= Self.forgetAfter ? .unrestricted : .probe
    }

    /// The probe the last admission allowed went out.
    mutating func probeSent() {
        guard case .unreachable(let since, let failures, let retryAt, _) = state else { return }
        state = .unreachable(since: since, failures: failures, retryAt: retryAt, probing: true)
    }

    /// The probe ended without saying anything about FCM (no access token, say): another one goes.
    mutating func probeInconclusive() {
        guard case .unreachable(let since, let failures, let retryAt, true) = state else { return }
        state = .unreachable(since: since, failures: failures, retryAt: retryAt, probing: false)
    }

    /// FCM answered a request (any HTTP answer, error or not).
    mutating func answered() {
        state = .reachable
    }

    /// A request did not reach FCM. `unreachable`: for want of a connection, which is what the
    /// breaker counts; otherwise it was refused unhandled or waited too long for a stream, and
    /// goes again after the shortest wait.
    mutating func notSent(unreachable: Bool, probe: Bool, now: ContinuousClock.Instant) -> Verdict {
        guard unreachable else {
            if probe { probeInconclusive() }
            if case .unreachable(_, _, let retryAt, _) = state { return .retry(at: max(retryAt, now + Self.shortestWait)) }
            return .retry(at: now + Self.shortestWait)
        }
        switch state {
        case .reachable:
            state = .unreachable(since: now, failures: 1, retryAt: now + wait(failures: 1), probing: false)
        case .unreachable(_, _, let retryAt, _) where now - retryAt > Self.forgetAfter:
            state = .unreachable(since: now, failures: 1, retryAt: now + wait(failures: 1), probing: false)
        case .unreachable(let since, let failures, let retryAt, let probing):
            // Requests already on their way when the breaker opened say nothing new; a failed
            // probe, or the first failure once the wait has passed, doubles the wait.
            if probe || (!probing && now >= retryAt) {
                state = .unreachable(since: since, failures: failures + 1, retryAt: now + wait(failures: failures + 1), probing: false)
            }
        }
        guard case .unreachable(let since, _, let retryAt, _) = state else { return .retry(at: now + Self.shortestWait) }
        return now - since >= longestOutage ? .giveUp(outageLongerThan: longestOutage) : .retry(at: retryAt)
    }

    private func wait(failures: Int) -> Duration {
        let doubled = Self.shortestWait * (1 << min(failures - 1, 16))
        return min(doubled, Self.longestWait) * jitter()
    }
}
