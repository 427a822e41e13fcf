import Logging
import Synchronization

/// Whether the database answers the worker, from when a ping (one every few seconds) was last
/// answered: one warning once it has been silent for `silence`, one notice when it answers
/// again. Queries wait in the connection pool while the database is away, and a statement sent
/// to a database that froze waits with them, so the send loop's own failures come late or not
/// at all: without this the log said nothing of an outage. The observer reads the time of the
/// last answer, never waiting for a ping.
///
/// A state machine: observations in, log lines out.
struct DatabaseWatch {
    /// The last answer before the silence that was warned about.
    private var silentSince: ContinuousClock.Instant?

    static let interval = Duration.seconds(5)
    static let pingDeadline = Duration.seconds(5)
    /// Two pings' worth: one can wait behind a busy pool.
    static let silence = Duration.seconds(10)

    struct Line: Equatable {
        let level: Logger.Level
        let message: String
        let metadata: [String: String]
    }

    /// `lastAnswer`: when a ping was last answered; `error`: why the last one failed, if it did.
    mutating func observed(lastAnswer: ContinuousClock.Instant, error: String?, now: ContinuousClock.Instant) -> Line? {
        if let since = silentSince {
            guard lastAnswer > since else { return nil }
            silentSince = nil
            return Line(
                level: .notice, message: "database answers again",
                metadata: ["push.unavailable_seconds": "\((lastAnswer - since).components.seconds)"])
        }
        guard now - lastAnswer >= Self.silence else { return nil }
        silentSince = lastAnswer
        return Line(
            level: .warning, message: "database not answering; the worker waits for it and resumes by itself",
            metadata: ["push.error": error ?? "no answer for \((now - lastAnswer).components.seconds) s"])
    }
}

/// Where the pings leave, for the watch, when one was last answered and why the last one failed.
final class DatabasePings: Sendable {
    private let state = Mutex<(lastAnswer: ContinuousClock.Instant, error: String?)>((.now, nil))

    func answered() { state.withLock { $0 = (.now, nil) } }
    func failed(_ reason: String) { state.withLock { $0.error = reason } }
    var last: (lastAnswer: ContinuousClock.Instant, error: String?) { state.withLock { $0 } }
}
