import DeviceRegistry

/// Whether FCM is failing an app's sends rather than one device: the share of server errors
/// (`UNAVAILABLE`, `INTERNAL`, other 5xx) among the app's last answers. A 5xx means FCM did not
/// take the message, so resending it duplicates nothing; but each one spends an attempt, and five
/// attempts over 1 + 2 + 4 + 8 s fail every delivery in flight for good during a brown-out of a
/// minute. Once most answers are server errors the send loop holds the deliveries instead, no
/// attempts spent, bounded in time: behind the circuit breaker when FCM fails as a whole
/// (``FCMWideFailures``), or the one app paused when FCM fails its project while it takes
/// another app's sends.
///
/// A state machine: answers in, verdicts out.
struct FCMServerFailures {
    /// The last answers, newest in the lowest bit: 1 for a server error.
    private var serverErrors: UInt64 = 0
    private var answers = 0
    private(set) var lastAnswer: ContinuousClock.Instant?
    /// When FCM last took one of these sends.
    private var lastAccepted: ContinuousClock.Instant?
    /// The first answer remembered.
    private var firstAnswer: ContinuousClock.Instant?
    /// Server errors since the last other answer.
    private(set) var serverErrorsInARow = 0

    static let windowSize = UInt64.bitWidth
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

    private var failures: Int { serverErrors.nonzeroBitCount }

    /// Records an answer (`accepted`: FCM took the message); true when FCM is failing these
    /// sends (at least half of at least `fewestAnswers` recent answers were server errors).
    mutating func record(serverError: Bool, accepted: Bool, now: ContinuousClock.Instant) -> Bool {
        if let last = lastAnswer, now - last > Self.forgetAfter { self = FCMServerFailures() }
        if firstAnswer == nil { firstAnswer = now }
        lastAnswer = now
        if accepted { lastAccepted = now }
        serverErrorsInARow = serverError ? serverErrorsInARow + 1 : 0
        serverErrors = serverErrors << 1 | (serverError ? 1 : 0)
        answers = min(answers + 1, Self.windowSize)
        return isFailing
    }

    var isFailing: Bool { Self.failing(answers: answers, failures: failures) }

    static func failing(answers: Int, failures: Int) -> Bool {
        answers >= fewestAnswers && failures * 2 >= answers
    }

    /// Since when FCM may have stopped taking these sends: their last it took, or, none taken,
    /// the first answer remembered.
    var takenUntil: ContinuousClock.Instant? { lastAccepted ?? firstAnswer }

    /// What these answers say of FCM as a whole, beside an app FCM may have stopped taking the
    /// sends of since `othersTakenUntil`: that app's server errors are FCM's own unless these
    /// answers say otherwise. FCM took one of these sends after then and within
    /// `vouchingRecency`, has answered them since without a server error, over enough recent
    /// answers of which server errors are not most.
    func vouchesForFCM(besideAnAppTakenUntil othersTakenUntil: ContinuousClock.Instant?, now: ContinuousClock.Instant) -> Bool {
        guard let accepted = lastAccepted, now - accepted <= Self.vouchingRecency else { return false }
        if let othersTakenUntil, othersTakenUntil >= accepted { return false }
        return serverErrorsInARow == 0 && answers >= Self.fewestAnswers && !isFailing
    }
}

/// The worker's last answers, whatever their app, for whether FCM fails as a whole: at least
/// half of at least `FCMServerFailures.fewestAnswers` are server errors. The answers of an app in
/// a brown-out of its own are left out: its project's trouble is not FCM's.
struct FCMWideFailures {
    private var apps = [Int64](repeating: 0, count: FCMServerFailures.windowSize)
    private var next = 0
    /// A bit a slot: whether it holds an answer that counts, and whether that was a server error.
    private var counted: UInt64 = 0
    private var serverErrors: UInt64 = 0
    private var lastAnswer: ContinuousClock.Instant?

    var isFailing: Bool {
        FCMServerFailures.failing(answers: counted.nonzeroBitCount, failures: (serverErrors & counted).nonzeroBitCount)
    }

    /// Records an answer. False when the answers before it were forgotten, as older than
    /// `FCMServerFailures.forgetAfter`: a brown-out they made is over.
    mutating func record(app: Int64, serverError: Bool, now: ContinuousClock.Instant) -> Bool {
        var kept = true
        if let last = lastAnswer, now - last > FCMServerFailures.forgetAfter {
            self = FCMWideFailures()
            kept = false
        }
        lastAnswer = now
        let bit = UInt64(1) << next
        apps[next] = app
        counted |= bit
        serverErrors = serverError ? serverErrors | bit : serverErrors & ~bit
        next = (next + 1) % FCMServerFailures.windowSize
        return kept
    }

    /// Leaves out the answers of `app`, which has a brown-out of its own.
    mutating func leaveOut(app: Int64) {
        for slot in apps.indices where apps[slot] == app { counted &= ~(UInt64(1) << slot) }
    }
}

extension SendOutcome {
    /// FCM failed to take the message, not for this device (quota and one device's rate are not).
    var isServerError: Bool {
        guard case .transient(let code, _, _, quota: false) = self else { return false }
        return code == .unavailable || code == .internal || code.rawValue == "DEADLINE_EXCEEDED" || code.rawValue.hasPrefix("HTTP_5")
    }
}
