import DeviceRegistry
import Foundation
import Testing

@testable import PushDispatch

/// Retry timing as fcm-protocol.md sets it: exponential with jitter, quota waits from a minute,
/// every wait bounded.
@Suite("Delivery policy: retry timing")
struct DeliveryPolicyTests {
    private static let job = DeliveryQueue.Job(
        id: 1, appID: 1, appCode: "wowa", message: PreparedMessage(messageJSON: "{}", validateOnly: false),
        account: ServiceAccount(projectID: "p", clientEmail: "e", privateKeyPEM: "k", privateKeyID: nil), projectProven: true)

    private static func claimed(attempts: Int) -> DeliveryQueue.Claimed {
        .init(lease: .row(1), jobID: 1, attempts: attempts, deviceID: 1, token: "t", tokenType: .fcm, deviceActive: true, jobRunning: true)
    }

    private static func seconds(_ duration: Duration) -> Double { DeliveryPolicy.seconds(duration) }

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

    @Test func retryAfterIsHonouredUpToAnHourAndQuotaPausesTheApp() {
        var policy = DeliveryPolicy(maxAttempts: 5)
        let now = Date()
        for (retryAfter, expected) in [(0, 0.0), (7, 7), (86_400, 3600)] {
            let decision = policy.decide(.transient(errorCode: "QUOTA_EXCEEDED", message: "m", retryAfter: .seconds(retryAfter), quota: true),
                                         for: Self.claimed(attempts: 0), job: Self.job, now: now)
            #expect(decision.result.status == "pending")
            #expect(abs(decision.result.nextAttempt.timeIntervalSince(now) - expected) < 0.001)
            #expect(decision.pauseApp.map(Self.seconds) == expected)
        }
        let last = policy.decide(.transient(errorCode: "UNAVAILABLE", message: "m", retryAfter: nil, quota: false),
                                 for: Self.claimed(attempts: 4), job: Self.job, now: now)
        #expect(last.result.status == "failed" && last.result.errorCode == "UNAVAILABLE", "the fifth attempt is the last")
    }
}
