import Synchronization

/// Slows down guessing the admin token on the sign-in form: the first few wrong tokens are
/// answered at once, then each further attempt must wait, doubling from one second to a
/// minute, after the last wrong one. Attempts during the wait are refused without looking at
/// the token, so a guesser gets one try per wait whatever their rate. One count for the whole
/// process, not per address: behind a proxy every browser has the proxy's address, and a
/// guesser can spread over addresses. A right token clears the count.
final class SignInThrottle: Sendable {
    /// Wrong tokens answered without a wait.
    static let freeFailures = 5
    static let longestWait: Duration = .seconds(60)

    private struct State {
        var failures = 0
        var lastFailure: ContinuousClock.Instant?
    }

    private let state = Mutex(State())

    /// Nil when an attempt may be checked now; otherwise how long until one may.
    func wait(now: ContinuousClock.Instant = .now) -> Duration? {
        state.withLock { state in
            guard state.failures >= Self.freeFailures, let last = state.lastFailure else { return nil }
            let left = last + Self.delay(afterFailures: state.failures) - now
            return left > .zero ? left : nil
        }
    }

    func recordFailure(now: ContinuousClock.Instant = .now) {
        state.withLock { state in
            state.failures += 1
            state.lastFailure = now
        }
    }

    func recordSuccess() {
        state.withLock { $0 = State() }
    }

    /// 1 s after the fifth wrong token, 2 s after the sixth, … at most a minute.
    static func delay(afterFailures failures: Int) -> Duration {
        let doublings = failures - freeFailures
        guard doublings >= 0 else { return .zero }
        guard doublings < 6 else { return longestWait }
        return min(.seconds(1 << doublings), longestWait)
    }
}
