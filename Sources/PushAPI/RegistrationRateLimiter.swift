import Synchronization

/// Registrations per user and app: `perMinute` a minute, of which all may come at once (a
/// generic cell rate algorithm: a token bucket of `perMinute` refilled evenly over a minute,
/// kept as one instant per user, the time at which their bucket is full again).
///
/// In this process's memory: with several push-api replicas a user may get up to `perMinute`
/// from each. Memory is bounded: a user whose bucket is full again is the same as one never
/// seen, and a bucket is full at most a minute after its last registration, so users are kept in
/// two generations swapped every minute; the older one is dropped when it is swapped, all of it
/// full by then. At most `maximumTrackedUsers` per generation: past that the generations are
/// swapped early, and the users dropped that way start again with a full bucket.
final class RegistrationRateLimiter: Sendable {
    struct User: Hashable {
        let appID: Int64
        let userID: Int64
    }

    private struct State {
        /// When each user's bucket is full again; only users that registered since the last swap.
        var current: [User: ContinuousClock.Instant] = [:]
        var previous: [User: ContinuousClock.Instant] = [:]
        var swapped: ContinuousClock.Instant
    }

    let perMinute: Int
    let maximumTrackedUsers: Int
    /// The time one registration takes to come back.
    private let interval: Duration
    private let state: Mutex<State>

    init(perMinute: Int, maximumTrackedUsers: Int = 100_000, now: ContinuousClock.Instant = .now) {
        precondition(perMinute > 0 && maximumTrackedUsers > 0)
        self.perMinute = perMinute
        self.maximumTrackedUsers = maximumTrackedUsers
        self.interval = .seconds(60) / perMinute
        self.state = Mutex(State(swapped: now))
    }

    /// Users remembered (in both generations).
    var trackedUsers: Int {
        state.withLock { $0.current.count + $0.previous.count }
    }

    /// Takes one registration from the user's bucket. Nil when admitted; otherwise how long until
    /// the next one is (nothing is taken then).
    func admit(_ user: User, now: ContinuousClock.Instant = .now) -> Duration? {
        state.withLock { state in
            if now - state.swapped >= .seconds(60) {
                state.previous = state.current
                state.current = [:]
                state.swapped = now
            }
            let full = state.current[user] ?? state.previous[user] ?? now
            let start = max(full, now)
            // A bucket holds a minute's worth: admitted while it is at least one interval short of that.
            let wait = start + interval - (now + .seconds(60))
            if wait > .zero { return wait }
            if state.current[user] == nil {
                state.previous[user] = nil
                if state.current.count >= maximumTrackedUsers {
                    state.previous = state.current
                    state.current = [:]
                    state.swapped = now
                }
            }
            state.current[user] = start + interval
            return nil
        }
    }
}
