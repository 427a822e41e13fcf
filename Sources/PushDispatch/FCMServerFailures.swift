import DeviceRegistry

/// Whether FCM is failing as a whole rather than for one device: the share of server errors
/// (`UNAVAILABLE`, `INTERNAL`, other 5xx) among its last answers. A 5xx means FCM did not take the
/// message, so resending it duplicates nothing; but each one spends an attempt, and five attempts
/// over 1 + 2 + 4 + 8 s fail every delivery in flight for good during a brown-out of a minute.
/// Once most answers are server errors the send loop treats FCM as unreachable instead: the
/// circuit breaker with probes, no attempts spent, bounded in time.
///
/// A state machine: answers in, a verdict out.
struct FCMServerFailures {
    /// The answers remembered, newest last: true for a server error.
    private var window: [Bool] = []
    private var failures = 0

    static let windowSize = 64
    /// So few answers say nothing: one device FCM fails for now and then is not a brown-out.
    static let fewestAnswers = 16

    /// Records an answer; true when FCM is failing as a whole (at least half of at least
    /// `fewestAnswers` recent answers were server errors).
    mutating func record(serverError: Bool) -> Bool {
        window.append(serverError)
        if serverError { failures += 1 }
        if window.count > Self.windowSize, window.removeFirst() { failures -= 1 }
        return window.count >= Self.fewestAnswers && failures * 2 >= window.count
    }

    /// FCM answers again: what it answered before says nothing about now.
    mutating func reset() {
        window.removeAll(keepingCapacity: true)
        failures = 0
    }
}

extension SendOutcome {
    /// FCM failed to take the message, not for this device (quota and one device's rate are not).
    var isServerError: Bool {
        guard case .transient(let code, _, _, quota: false) = self else { return false }
        return code == .unavailable || code == .internal || code.rawValue == "DEADLINE_EXCEEDED" || code.rawValue.hasPrefix("HTTP_5")
    }
}
