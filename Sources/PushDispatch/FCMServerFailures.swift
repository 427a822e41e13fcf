import DeviceRegistry

/// Whether FCM is failing rather than one device: the share of server errors (`UNAVAILABLE`,
/// `INTERNAL`, other 5xx) among the last answers, the worker's or one app's. A 5xx means FCM did
/// not take the message, so resending it duplicates nothing; but each one spends an attempt, and
/// five attempts over 1 + 2 + 4 + 8 s fail every delivery in flight for good during a brown-out
/// of a minute. Once most answers are server errors the send loop holds the deliveries instead,
/// no attempts spent, bounded in time: behind the circuit breaker when FCM fails as a whole, or
/// the one app paused when FCM fails its project while it answers others well.
///
/// A state machine: answers in, a verdict out.
struct FCMServerFailures {
    /// The last answers, a ring of `windowSize`: true for a server error.
    private var window = [Bool](repeating: false, count: windowSize)
    private var next = 0
    private var answers = 0
    private var failures = 0
    private(set) var lastAnswer: ContinuousClock.Instant?

    static let windowSize = 64
    /// So few answers say nothing: one device FCM fails for now and then is not a brown-out.
    static let fewestAnswers = 16
    /// Answers older than this say nothing about now: a worker whose sends stopped after a
    /// brown-out would otherwise take its next 503, hours later, for the brown-out going on (and
    /// past its hour's bound, fail the job). Longer than the breaker's longest wait between
    /// probes (a minute; a brown-out's waits are held to it), so that a brown-out the breaker is
    /// probing is not forgotten.
    static let forgetAfter = FCMReachability.forgetAfter

    /// Another app vouches for FCM only with an answer this recent.
    static let vouchingRecency = Duration.seconds(10)

    /// Records an answer; true when FCM is failing (at least half of at least `fewestAnswers`
    /// recent answers were server errors).
    mutating func record(serverError: Bool, now: ContinuousClock.Instant) -> Bool {
        if let last = lastAnswer, now - last > Self.forgetAfter { self = FCMServerFailures() }
        lastAnswer = now
        if answers == Self.windowSize, window[next] { failures -= 1 }
        answers = min(answers + 1, Self.windowSize)
        window[next] = serverError
        if serverError { failures += 1 }
        next = (next + 1) % Self.windowSize
        return isFailing
    }

    var isFailing: Bool { answers >= Self.fewestAnswers && failures * 2 >= answers }

    /// FCM answered these sends well just now: the last answer, within `vouchingRecency`, was
    /// not a server error and server errors are not most answers. Another app's such answers
    /// say that an app's server errors are its project's, not FCM failing as a whole.
    func answersWell(now: ContinuousClock.Instant) -> Bool {
        guard let last = lastAnswer, now - last <= Self.vouchingRecency else { return false }
        return !window[(next + Self.windowSize - 1) % Self.windowSize] && !isFailing
    }
}

extension SendOutcome {
    /// FCM failed to take the message, not for this device (quota and one device's rate are not).
    var isServerError: Bool {
        guard case .transient(let code, _, _, quota: false) = self else { return false }
        return code == .unavailable || code == .internal || code.rawValue == "DEADLINE_EXCEEDED" || code.rawValue.hasPrefix("HTTP_5")
    }
}
