import DeviceRegistry

/// Whether FCM is failing one app's sends rather than one device's: the share of server errors
/// (`UNAVAILABLE`, `INTERNAL`, other 5xx) among the app's last answers. A 5xx means FCM did not
/// take the message, so resending it duplicates nothing; but each one spends an attempt, and five
/// attempts over 1 + 2 + 4 + 8 s fail every delivery in flight for good during a brown-out of a
/// minute. Once most answers are server errors the send loop holds the deliveries instead, no
/// attempts spent, bounded in time: behind the circuit breaker when FCM fails as a whole (the
/// apps' windows summed), or the one app paused when FCM fails its project while it takes
/// another app's sends.
///
/// A state machine: answers in, verdicts out.
struct FCMServerFailures {
    /// The last answers, a ring of `windowSize`: true for a server error.
    private var window = [Bool](repeating: false, count: windowSize)
    private var next = 0
    private(set) var answers = 0
    private(set) var failures = 0
    private(set) var lastAnswer: ContinuousClock.Instant?
    /// When FCM last took one of these sends.
    private var lastAccepted: ContinuousClock.Instant?
    /// Server errors since the last other answer.
    private(set) var serverErrorsInARow = 0

    static let windowSize = 64
    /// So few answers say nothing: one device FCM fails for now and then is not a brown-out.
    static let fewestAnswers = 16
    /// Answers older than this say nothing about now: a worker whose sends stopped after a
    /// brown-out would otherwise take its next 503, hours later, for the brown-out going on (and
    /// past its hour's bound, fail the job). Longer than the breaker's longest wait between
    /// probes (a minute; a brown-out's waits are held to it), so that a brown-out the breaker is
    /// probing is not forgotten.
    static let forgetAfter = FCMReachability.forgetAfter

    /// Another app vouches for FCM only with a send FCM took this recently.
    static let vouchingRecency = Duration.seconds(10)

    /// Records an answer (`accepted`: FCM took the message); true when FCM is failing these
    /// sends (at least half of at least `fewestAnswers` recent answers were server errors).
    mutating func record(serverError: Bool, accepted: Bool, now: ContinuousClock.Instant) -> Bool {
        if let last = lastAnswer, now - last > Self.forgetAfter { self = FCMServerFailures() }
        lastAnswer = now
        if accepted { lastAccepted = now }
        serverErrorsInARow = serverError ? serverErrorsInARow + 1 : 0
        if answers == Self.windowSize, window[next] { failures -= 1 }
        answers = min(answers + 1, Self.windowSize)
        window[next] = serverError
        if serverError { failures += 1 }
        next = (next + 1) % Self.windowSize
        return isFailing
    }

    var isFailing: Bool { Self.failing(answers: answers, failures: failures) }

    static func failing(answers: Int, failures: Int) -> Bool {
        answers >= fewestAnswers && failures * 2 >= answers
    }

    /// What these answers say of FCM as a whole: its other apps' server errors are FCM's own
    /// unless this one's say otherwise. FCM took one of its sends within `vouchingRecency` and
    /// has answered it since without a server error, over enough recent answers of which server
    /// errors are not most.
    func vouchesForFCM(now: ContinuousClock.Instant) -> Bool {
        guard let accepted = lastAccepted, now - accepted <= Self.vouchingRecency else { return false }
        return serverErrorsInARow == 0 && answers >= Self.fewestAnswers && !isFailing
    }
}

extension SendOutcome {
    /// FCM failed to take the message, not for this device (quota and one device's rate are not).
    var isServerError: Bool {
        guard case .transient(let code, _, _, quota: false) = self else { return false }
        return code == .unavailable || code == .internal || code.rawValue == "DEADLINE_EXCEEDED" || code.rawValue.hasPrefix("HTTP_5")
    }
}
