import Logging

/// Whether the database answers the worker, from a ping every few seconds: one warning when it
/// stops (after two pings in a row went unanswered: one can wait behind a busy pool), one notice
/// when it answers again. Queries wait in the connection pool while the database is away, so the
/// send loop's own failures come late or not at all, and the log said nothing of an outage.
///
/// A state machine: ping results in, log lines out.
struct DatabaseWatch {
    private var failedPings = 0
    private var since: ContinuousClock.Instant?
    private var warned = false

    static let interval = Duration.seconds(5)
    static let pingDeadline = Duration.seconds(5)

    struct Line: Equatable {
        let level: Logger.Level
        let message: String
        let metadata: [String: String]
    }

    mutating func pinged(answered: Bool, error: String? = nil, now: ContinuousClock.Instant) -> Line? {
        if answered {
            defer { (failedPings, since, warned) = (0, nil, false) }
            guard warned, let since else { return nil }
            return Line(
                level: .notice, message: "database answers again",
                metadata: ["push.unavailable_seconds": "\((now - since).components.seconds)"])
        }
        failedPings += 1
        if since == nil { since = now }
        guard failedPings >= 2, !warned else { return nil }
        warned = true
        return Line(
            level: .warning, message: "database not answering; the worker waits for it and resumes by itself",
            metadata: ["push.error": error ?? "no answer"])
    }
}
