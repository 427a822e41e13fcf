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
        #expect(!failures.vouchesForFCM(now: start), "fifteen answers are too few to say")
        _ = failures.record(serverError: false, accepted: true, now: start)
        #expect(failures.vouchesForFCM(now: start) && !failures.vouchesForFCM(now: start + .seconds(11)))
        // A refusal of one device (404, 400) is no server error, but no sign FCM takes sends either.
        _ = failures.record(serverError: false, accepted: false, now: start + .seconds(11))
        #expect(!failures.vouchesForFCM(now: start + .seconds(11)))
        _ = failures.record(serverError: false, accepted: true, now: start + .seconds(12))
        #expect(failures.vouchesForFCM(now: start + .seconds(12)))
        // A server error since: not until FCM answers otherwise.
        _ = failures.record(serverError: true, accepted: false, now: start + .seconds(12))
        #expect(!failures.vouchesForFCM(now: start + .seconds(12)) && failures.serverErrorsInARow == 1)
        _ = failures.record(serverError: false, accepted: false, now: start + .seconds(13))
        #expect(failures.vouchesForFCM(now: start + .seconds(13)) && failures.serverErrorsInARow == 0)
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
