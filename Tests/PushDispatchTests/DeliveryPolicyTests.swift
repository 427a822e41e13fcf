import DeviceRegistry
import Foundation
import Testing

@testable import PushDispatch

/// Retry timing (exponential with jitter, quota waits from a minute, every wait bounded) and
/// when an answer ends the job rather than failing its device.
@Suite("Delivery policy")
struct DeliveryPolicyTests {
    private static let job = DeliveryQueue.Job(
        id: 1, appID: 1, appCode: "wowa", message: PreparedMessage(messageJSON: "{}", validateOnly: false),
        account: ServiceAccount(projectID: "p", clientEmail: "e", privateKeyPEM: "k", privateKeyID: nil), projectProven: true)

    private static func claimed(attempts: Int, device: Int64 = 1) -> DeliveryQueue.Claimed {
        .init(
            lease: .row(device), jobID: 1, attempts: attempts, deviceID: device, token: "t", tokenType: .fcm, deviceActive: true,
            jobRunning: true)
    }

    private static let unprovenJob = DeliveryQueue.Job(
        id: 1, appID: 1, appCode: "wowa", message: PreparedMessage(messageJSON: "{}", validateOnly: false),
        account: ServiceAccount(projectID: "p", clientEmail: "e", privateKeyPEM: "k", privateKeyID: nil), projectProven: false)

    /// Every answer that blames the message, credentials or project rather than the device.
    static let jobBlamingOutcomes: [SendOutcome] = [
        .payloadRejected(errorCode: .invalidArgument, message: "bad"), .payloadRejected(errorCode: .invalidArgument, message: "HTTP 400"),
        .permissionDenied(message: "denied"), .notFound(message: "HTTP 404"), .unauthenticated, .senderMismatch(message: "mismatch"),
        .notFCM(errorCode: .httpStatus(302), message: "HTTP 302"),
    ]

    /// One such answer fails its device only; the job fails at the tenth with none of its sends
    /// accepted, and the devices are never deactivated for it.
    @Test(arguments: jobBlamingOutcomes)
    func oneDeviceNeverEndsAJobButWholesaleEvidenceDoes(outcome: SendOutcome) {
        var policy = DeliveryPolicy(maxAttempts: 5)
        for device in 1...9 {
            let decision = policy.decide(outcome, for: Self.claimed(attempts: 0, device: Int64(device)), job: Self.unprovenJob)
            #expect(decision.result.status == .failed && decision.failJob == nil && decision.deactivate == nil)
        }
        let tenth = policy.decide(outcome, for: Self.claimed(attempts: 0, device: 10), job: Self.unprovenJob)
        #expect(tenth.result.status == .failed && tenth.deactivate == nil)
        #expect(tenth.failJob?.hasPrefix("app wowa: ") == true)
    }

    /// Once a send of the job was accepted, the message, credentials and project are fine for
    /// it: such answers are each device's own, however many come.
    @Test(arguments: jobBlamingOutcomes.filter { if case .senderMismatch = $0 { false } else { true } })
    func anAcceptedSendMakesSuchAnswersPerDevice(outcome: SendOutcome) {
        var policy = DeliveryPolicy(maxAttempts: 5)
        #expect(policy.decide(.sent(messageID: "1"), for: Self.claimed(attempts: 0), job: Self.job).failJob == nil)
        for device in 2...40 {
            let decision = policy.decide(outcome, for: Self.claimed(attempts: 0, device: Int64(device)), job: Self.job)
            #expect(decision.result.status == .failed && decision.failJob == nil)
        }
    }

    /// SENDER_ID_MISMATCH to a project sends have succeeded for is the token's: deactivated.
    @Test func senderMismatchToAProvenProjectDeactivatesTheToken() {
        var policy = DeliveryPolicy(maxAttempts: 5)
        let decision = policy.decide(.senderMismatch(message: "m"), for: Self.claimed(attempts: 0), job: Self.job)
        #expect(decision.result.errorCode == .senderIDMismatch && decision.failJob == nil)
        #expect(decision.deactivate?.reason == .senderIDMismatch)
    }

    private static func seconds(_ duration: Duration) -> Double { duration.inSeconds }

    @Test(arguments: 1...8)
    func backoffStaysWithinItsBounds(attempt: Int) {
        let base = pow(2, Double(attempt - 1))
        for _ in 0..<200 {
            let plain = Self.seconds(DeliveryPolicy.backoff(attempt: attempt, quota: false))
            #expect(plain >= min(base * 0.5, 300) - 0.001 && plain <= min(base * 1.5, 300) + 0.001)
            let quota = Self.seconds(DeliveryPolicy.backoff(attempt: attempt, quota: true))
            #expect(quota >= 60 && quota <= min(60 * base * 1.5, 300) + 0.001, "attempt \(attempt): \(quota) s")
        }
    }

    /// From a second to an hour: `Retry-After: 0` (or a date past) once spent every attempt in
    /// three seconds.
    @Test func retryAfterIsHonouredFromASecondToAnHourAndQuotaPausesTheApp() {
        var policy = DeliveryPolicy(maxAttempts: 5)
        let now = Date()
        for (retryAfter, expected) in [(0, 1.0), (7, 7), (120, 120), (86_400, 3600)] {
            let decision = policy.decide(
                .transient(errorCode: .quotaExceeded, message: "m", retryAfter: .seconds(retryAfter), quota: true),
                for: Self.claimed(attempts: 0), job: Self.job, now: now)
            #expect(decision.result.status == .pending)
            #expect(abs(decision.result.nextAttempt.timeIntervalSince(now) - expected) < 0.001)
            #expect(decision.pauseApp.map(Self.seconds) == expected)
        }
        for (retryAfter, expected) in [(0, 1.0), (7, 7)] {
            let decision = policy.decide(
                .transient(errorCode: .unavailable, message: "m", retryAfter: .seconds(retryAfter), quota: false),
                for: Self.claimed(attempts: 0), job: Self.job, now: now)
            #expect(abs(decision.result.nextAttempt.timeIntervalSince(now) - expected) < 0.001 && decision.pauseApp == nil)
        }
        let last = policy.decide(
            .transient(errorCode: .unavailable, message: "m", retryAfter: nil, quota: false),
            for: Self.claimed(attempts: 4), job: Self.job, now: now)
        #expect(last.result.status == .failed && last.result.errorCode == .unavailable, "the fifth attempt is the last")
    }
}
