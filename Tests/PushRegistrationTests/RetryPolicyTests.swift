import Testing

@testable import PushRegistration

@Suite("Retry policy")
struct RetryPolicyTests {
    @Test func doublesFromTheInitialDelayUpToTheMaximum() {
        let policy = RetryPolicy(initialDelay: .seconds(1), maximumDelay: .seconds(300))
        let delays = (1...12).map { policy.delay(afterFailures: $0, retryAfter: nil, jitter: 1) }
        #expect(Array(delays.prefix(9)) == [1, 2, 4, 8, 16, 32, 64, 128, 256].map { Duration.seconds($0) })
        #expect(delays.dropFirst(9).allSatisfy { $0 == .seconds(300) })
        // However many failures: no overflow, still the cap.
        #expect(policy.delay(afterFailures: 10_000, retryAfter: nil, jitter: 1) == .seconds(300))
    }

    @Test func jitterKeepsEachWaitBetweenHalfAndAllOfIt() {
        let policy = RetryPolicy.standard
        #expect(policy.delay(afterFailures: 3, retryAfter: nil, jitter: 0) == .seconds(2))
        #expect(policy.delay(afterFailures: 3, retryAfter: nil, jitter: 0.5) == .seconds(3))
        #expect(policy.delay(afterFailures: 3, retryAfter: nil, jitter: 0.999_999) <= .seconds(4))
        // Out-of-range samples are clamped, never a negative or longer wait.
        #expect(policy.delay(afterFailures: 1, retryAfter: nil, jitter: -3) == .milliseconds(500))
        #expect(policy.delay(afterFailures: 1, retryAfter: nil, jitter: 7) == .seconds(1))
    }

    @Test func retryAfterWinsUpToItsCap() {
        let policy = RetryPolicy(maximumRetryAfter: .seconds(3600))
        #expect(policy.delay(afterFailures: 1, retryAfter: .seconds(120), jitter: 0) == .seconds(120))
        #expect(policy.delay(afterFailures: 9, retryAfter: .zero, jitter: 1) == .zero)
        #expect(policy.delay(afterFailures: 1, retryAfter: .seconds(86_400), jitter: 0) == .seconds(3600))
    }
}
