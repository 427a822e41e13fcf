import DeviceRegistry
import Testing

@testable import PushDispatch

/// When FCM's server errors are FCM failing as a whole rather than one device's bad luck.
@Suite("FCM server failures")
struct FCMServerFailuresTests {
    let start = ContinuousClock.now

    @Test func halfOfSixteenOrMoreRecentAnswersIsABrownOut() {
        var failures = FCMServerFailures()
        // Fifteen server errors in a row are too few answers to say.
        for _ in 0..<15 {
            let brownOut = failures.record(serverError: true, accepted: false, now: start)
            #expect(!brownOut)
        }
        let sixteenth = failures.record(serverError: true, accepted: false, now: start)
        #expect(sixteenth)
        failures = FCMServerFailures()
        // Half of the answers, counted over the last 64 only.
        var verdicts: [Bool] = []
        for _ in 0..<64 { verdicts.append(failures.record(serverError: false, accepted: true, now: start)) }
        for _ in 0..<31 { verdicts.append(failures.record(serverError: true, accepted: false, now: start)) }
        #expect(!verdicts.contains(true))
        let half = failures.record(serverError: true, accepted: false, now: start)
        #expect(half, "32 of the last 64")
        // 33 answers that went through: 31 of the last 64 were server errors.
        var last = true
        for _ in 0..<33 { last = failures.record(serverError: false, accepted: true, now: start) }
        #expect(!last, "31 of the last 64")
    }

    /// Answers a probe a minute apart keep a brown-out; after five minutes without any, what FCM
    /// answered says nothing about now.
    @Test func answersFiveMinutesOldAreForgotten() {
        var failures = FCMServerFailures()
        for _ in 0..<16 { _ = failures.record(serverError: true, accepted: false, now: start) }
        let probed = failures.record(serverError: true, accepted: false, now: start + .seconds(61))
        #expect(probed)
        let muchLater = failures.record(
            serverError: true, accepted: false, now: start + .seconds(61) + FCMServerFailures.forgetAfter + .seconds(1))
        #expect(!muchLater, "one server error after the silence is one device's bad luck")
    }

    /// An app vouches for FCM with a send FCM took in the last ten seconds, answers since without
    /// a server error, and enough recent answers, most of them not server errors.
    @Test func anAppVouchesForFCMWithARecentAcceptedSendAndNoServerErrorSince() {
        var failures = FCMServerFailures()
        for _ in 0..<15 { _ = failures.record(serverError: false, accepted: true, now: start) }
        #expect(!failures.vouchesForFCM(besideAnAppTakenUntil: nil, now: start), "fifteen answers are too few to say")
        _ = failures.record(serverError: false, accepted: true, now: start)
        #expect(
            failures.vouchesForFCM(besideAnAppTakenUntil: nil, now: start)
                && !failures.vouchesForFCM(besideAnAppTakenUntil: nil, now: start + .seconds(11)))
        // A refusal of one device (404, 400) is no server error, but no sign FCM takes sends either.
        _ = failures.record(serverError: false, accepted: false, now: start + .seconds(11))
        #expect(!failures.vouchesForFCM(besideAnAppTakenUntil: nil, now: start + .seconds(11)))
        _ = failures.record(serverError: false, accepted: true, now: start + .seconds(12))
        #expect(failures.vouchesForFCM(besideAnAppTakenUntil: nil, now: start + .seconds(12)))
        // A server error since: not until FCM answers otherwise.
        _ = failures.record(serverError: true, accepted: false, now: start + .seconds(12))
        #expect(!failures.vouchesForFCM(besideAnAppTakenUntil: nil, now: start + .seconds(12)) && failures.serverErrorsInARow == 1)
        _ = failures.record(serverError: false, accepted: false, now: start + .seconds(13))
        #expect(failures.vouchesForFCM(besideAnAppTakenUntil: nil, now: start + .seconds(13)) && failures.serverErrorsInARow == 0)
        // Not beside an app FCM took a send of since: FCM may have stopped taking them after that.
        #expect(!failures.vouchesForFCM(besideAnAppTakenUntil: start + .seconds(12), now: start + .seconds(13)))
        #expect(failures.vouchesForFCM(besideAnAppTakenUntil: start + .seconds(11), now: start + .seconds(13)))
    }

    /// The worker's last 64 answers, whatever their app; an app in a brown-out of its own left
    /// out; all of them forgotten after five minutes without an answer.
    @Test func theWorkersAnswersLeaveOutAnAppInItsOwnBrownOut() {
        var wide = FCMWideFailures()
        var kept: [Bool] = []
        for _ in 0..<16 { kept.append(wide.record(app: 1, serverError: true, now: start)) }
        for _ in 0..<15 { kept.append(wide.record(app: 2, serverError: false, now: start)) }
        #expect(!kept.contains(false))
        #expect(wide.isFailing, "16 of 31")
        wide.leaveOut(app: 1)
        #expect(!wide.isFailing, "app 2's 15 answers are too few to say")
        for _ in 0..<15 { _ = wide.record(app: 2, serverError: true, now: start) }
        #expect(wide.isFailing, "15 of app 2's 30")
        // Past 64 answers the oldest (app 1's, left out or not) no longer count.
        for _ in 0..<34 { _ = wide.record(app: 3, serverError: false, now: start) }
        #expect(!wide.isFailing, "15 of 64")
        let keptAfterSilence = wide.record(app: 3, serverError: true, now: start + FCMServerFailures.forgetAfter + .seconds(1))
        #expect(!keptAfterSilence, "forgotten")
        #expect(!wide.isFailing)
    }

    @Test func serverErrorsAreFCMsOwnNotQuotaNorADevicesRate() {
        func transient(_ code: String, quota: Bool = false) -> SendOutcome {
            .transient(errorCode: DeliveryErrorCode(rawValue: code), message: "m", retryAfter: nil, quota: quota)
        }
        #expect(["UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED", "HTTP_502"].allSatisfy { transient($0).isServerError })
        #expect(!transient("QUOTA_EXCEEDED").isServerError && !transient("QUOTA_EXCEEDED", quota: true).isServerError)
        #expect(!transient("HTTP_408").isServerError && !SendOutcome.noAnswer(message: "m").isServerError)
        #expect(!SendOutcome.sent(messageID: "m").isServerError)
    }
}
