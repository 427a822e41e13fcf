import Testing

@testable import PushAPI

@Suite("RegistrationRateLimiter")
struct RegistrationRateLimiterTests {
    let start = ContinuousClock.now
    let alice = RegistrationRateLimiter.User(appID: 1, userID: 1)

    @Test func aMinutesWorthAtOnceThenOneEveryInterval() {
        let limiter = RegistrationRateLimiter(perMinute: 6, now: start)
        for _ in 0..<6 { #expect(limiter.admit(alice, now: start) == nil) }
        #expect(limiter.admit(alice, now: start) == .seconds(10))
        #expect(limiter.admit(alice, now: start + .seconds(4)) == .seconds(6))
        #expect(limiter.admit(alice, now: start + .seconds(10)) == nil)
        #expect(limiter.admit(alice, now: start + .seconds(10)) == .seconds(10))
        // A full minute later the bucket is full again.
        for _ in 0..<6 { #expect(limiter.admit(alice, now: start + .seconds(80)) == nil) }
        #expect(limiter.admit(alice, now: start + .seconds(80)) != nil)
    }

    @Test func usersAndAppsHaveTheirOwnBuckets() {
        let limiter = RegistrationRateLimiter(perMinute: 1, now: start)
        #expect(limiter.admit(alice, now: start) == nil)
        #expect(limiter.admit(alice, now: start) == .seconds(60))
        #expect(limiter.admit(.init(appID: 1, userID: 2), now: start) == nil)
        #expect(limiter.admit(.init(appID: 2, userID: 1), now: start) == nil)
    }

    /// Users are forgotten once their bucket is full again, a minute or two after their last
    /// registration, and never more than two generations are kept: memory follows the users of
    /// the last minutes, not every user ever seen.
    @Test func memoryIsBoundedAndNoBudgetIsLostByForgetting() {
        let limiter = RegistrationRateLimiter(perMinute: 2, maximumTrackedUsers: 100, now: start)
        let user1 = RegistrationRateLimiter.User(appID: 1, userID: 1)
        for user in Int64(1)...50 { #expect(limiter.admit(.init(appID: 1, userID: user), now: start) == nil) }
        #expect(limiter.admit(user1, now: start + .seconds(59)) == nil)
        #expect(limiter.admit(user1, now: start + .seconds(59)) == nil)
        #expect(limiter.admit(user1, now: start + .seconds(59)) == .seconds(30))
        // Swapped after a minute: user 1 is still limited, from the older generation.
        #expect(limiter.admit(user1, now: start + .seconds(61)) == .seconds(28))
        #expect(limiter.trackedUsers == 50)
        // Another minute on, all of them are forgotten, their buckets full again by then.
        #expect(limiter.admit(.init(appID: 1, userID: 999), now: start + .seconds(122)) == nil)
        #expect(limiter.trackedUsers == 1)
        #expect(limiter.admit(user1, now: start + .seconds(122)) == nil)
        #expect(limiter.admit(user1, now: start + .seconds(122)) == nil)
        #expect(limiter.admit(user1, now: start + .seconds(122)) != nil)

        // Many distinct users within a minute: at most two generations of 100.
        for user in Int64(1000)..<1500 { _ = limiter.admit(.init(appID: 1, userID: user), now: start + .seconds(130)) }
        #expect(limiter.trackedUsers <= 200)
    }
}
