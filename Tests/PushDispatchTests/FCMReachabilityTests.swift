import Testing

@testable import PushDispatch

/// The circuit breaker in front of FCM, driven by events with a clock the test holds.
@Suite("FCM reachability (circuit breaker)")
struct FCMReachabilityTests {
    let start = ContinuousClock.now

    func at(_ seconds: Double) -> ContinuousClock.Instant { start + .milliseconds(Int(seconds * 1000)) }

    @Test func anUnreachableFCMClosesTheBreakerUntilItsWaitThenAdmitsOneProbe() {
        var breaker = FCMReachability(longestOutage: .seconds(3600), jitter: { 1 })
        #expect(breaker.admission(now: at(0)) == .unrestricted)
        // The first request that finds no connection opens it for a second.
        #expect(breaker.notSent(unreachable: true, probe: false, now: at(0)) == .retry(at: at(1)))
        #expect(!breaker.isReachable)
        // The other requests of the same outage change nothing.
        #expect(breaker.notSent(unreachable: true, probe: false, now: at(0.2)) == .retry(at: at(1)))
        #expect(breaker.admission(now: at(0.9)) == .closed)
        #expect(breaker.admission(now: at(1)) == .probe)
        breaker.probeSent()
        #expect(breaker.admission(now: at(1.5)) == .closed)
        // A failed probe doubles the wait: 2 s, then 4 s, …
        #expect(breaker.notSent(unreachable: true, probe: true, now: at(1.1)) == .retry(at: at(3.1)))
        #expect(breaker.admission(now: at(3.1)) == .probe)
        breaker.probeSent()
        #expect(breaker.notSent(unreachable: true, probe: true, now: at(3.2)) == .retry(at: at(7.2)))
        // An answer from FCM closes it again.
        breaker.answered()
        #expect(breaker.isReachable && breaker.admission(now: at(7.3)) == .unrestricted)
    }

    @Test func theWaitGrowsToAMinuteAndIsJittered() {
        var breaker = FCMReachability(longestOutage: .seconds(3600), jitter: { 1 })
        var now = at(0)
        var waits: [Duration] = []
        _ = breaker.notSent(unreachable: true, probe: false, now: now)
        for _ in 0..<9 {
            now = now + .seconds(120)
            breaker.probeSent()
            guard case .retry(let next) = breaker.notSent(unreachable: true, probe: true, now: now) else {
                Issue.record("gave up within the bound")
                return
            }
            waits.append(next - now)
        }
        #expect(waits == [2, 4, 8, 16, 32, 60, 60, 60, 60].map { Duration.seconds($0) })

        var jittered = FCMReachability(longestOutage: .seconds(3600), jitter: { 0.75 })
        #expect(jittered.notSent(unreachable: true, probe: false, now: at(0)) == .retry(at: at(0.75)))
    }

    @Test func aProbeThatSaysNothingAboutFCMIsFollowedByAnother() {
        var breaker = FCMReachability(longestOutage: .seconds(3600), jitter: { 1 })
        _ = breaker.notSent(unreachable: true, probe: false, now: at(0))
        breaker.probeSent()
        #expect(breaker.admission(now: at(2)) == .closed)
        // No access token for the probe's app, say.
        breaker.probeInconclusive()
        #expect(breaker.admission(now: at(2)) == .probe)
        // A probe refused unhandled (GOAWAY) is inconclusive too, and waits the shortest wait.
        breaker.probeSent()
        #expect(breaker.notSent(unreachable: false, probe: true, now: at(2)) == .retry(at: at(3)))
        #expect(breaker.admission(now: at(2)) == .probe)
    }

    @Test func requestsRefusedUnhandledRetrySoonAndDoNotOpenIt() {
        var breaker = FCMReachability(longestOutage: .seconds(3600), jitter: { 1 })
        #expect(breaker.notSent(unreachable: false, probe: false, now: at(0)) == .retry(at: at(1)))
        #expect(breaker.isReachable && breaker.admission(now: at(0)) == .unrestricted)
    }

    @Test func pastTheLongestOutageDeliveriesFailUntilFCMAnswers() {
        var breaker = FCMReachability(longestOutage: .seconds(10), jitter: { 1 })
        _ = breaker.notSent(unreachable: true, probe: false, now: at(0))
        for second in [1.0, 3, 7] {
            breaker.probeSent()
            #expect(breaker.notSent(unreachable: true, probe: true, now: at(second)) != .giveUp(outageLongerThan: .seconds(10)))
        }
        breaker.probeSent()
        #expect(breaker.notSent(unreachable: true, probe: true, now: at(15)) == .giveUp(outageLongerThan: .seconds(10)))
        // Once the wait has passed, every claim goes out (and fails at once if FCM is still away),
        // rather than one probe at a time.
        #expect(breaker.admission(now: at(15 + 16)) == .unrestricted)
        #expect(breaker.notSent(unreachable: true, probe: false, now: at(31)) == .giveUp(outageLongerThan: .seconds(10)))
        #expect(breaker.admission(now: at(31)) == .closed)
        breaker.answered()
        #expect(breaker.notSent(unreachable: true, probe: false, now: at(40)) == .retry(at: at(41)))
    }

    /// A worker left idle after an outage past its bound (its jobs failed or were cancelled):
    /// minutes later, nothing tried since, its next failure is a new outage with its own hour.
    @Test func anOutageNothingTriedForFiveMinutesIsOver() {
        var breaker = FCMReachability(longestOutage: .seconds(10), jitter: { 1 })
        _ = breaker.notSent(unreachable: true, probe: false, now: at(0))
        breaker.probeSent()
        #expect(breaker.notSent(unreachable: true, probe: true, now: at(12)) == .giveUp(outageLongerThan: .seconds(10)))
        let later = 14 + FCMReachability.forgetAfter.inSeconds + 1
        #expect(breaker.admission(now: at(later)) == .probe, "one probe, not every claim failing at once")
        breaker.probeSent()
        #expect(breaker.notSent(unreachable: true, probe: true, now: at(later)) == .retry(at: at(later + 1)))
    }
}
