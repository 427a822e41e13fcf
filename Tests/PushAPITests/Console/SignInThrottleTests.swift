import Foundation
import Hummingbird
import HummingbirdTesting
import TestSupport
import Testing

@testable import PushAPI

@Suite("Console sign-in throttle")
struct SignInThrottleTests {
    @Test func theWaitDoublesFromOneSecondToAMinuteAfterFiveFreeFailures() {
        #expect((0...5).map(SignInThrottle.delay(afterFailures:)) == [.zero, .zero, .zero, .zero, .zero, .seconds(1)])
        #expect(
            (6...12).map(SignInThrottle.delay(afterFailures:)) == [
                .seconds(2), .seconds(4), .seconds(8), .seconds(16), .seconds(32),
                .seconds(60), .seconds(60),
            ])
        #expect(SignInThrottle.delay(afterFailures: 1000) == .seconds(60))
    }

    @Test func attemptsWaitAfterTheLastFailureAndARightTokenClearsTheCount() {
        let throttle = SignInThrottle()
        let start = ContinuousClock.now
        for second in 0..<5 {
            #expect(throttle.wait(now: start + .seconds(second)) == nil)
            throttle.recordFailure(now: start + .seconds(second))
        }
        // The fifth failure at +4 s: the next attempt waits one second.
        #expect(throttle.wait(now: start + .milliseconds(4500)) == .milliseconds(500))
        #expect(throttle.wait(now: start + .seconds(5)) == nil)
        throttle.recordFailure(now: start + .seconds(5))
        #expect(throttle.wait(now: start + .seconds(6)) == .seconds(1))
        throttle.recordSuccess()
        #expect(throttle.wait(now: start + .seconds(6)) == nil)
    }

    @Test func repeatedWrongTokensPauseSignInEvenForTheRightOne() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            for _ in 0..<SignInThrottle.freeFailures {
                #expect(try await browser.signIn(client, token: "wrong-token-guess").status == .unauthorized)
            }
            let paused = try await browser.signIn(client)
            #expect(paused.status == .tooManyRequests)
            #expect(paused.text.contains("Too many wrong tokens: sign-in is paused, try again in 1 s."), "\(paused.text)")
            #expect(paused.headers[.retryAfter] == "1")
            #expect(browser.cookies["push_console_session"] == nil)
            try await Task.sleep(for: .milliseconds(1100))
            let admitted = try await browser.signIn(client)
            #expect(admitted.status == .seeOther)
            #expect(browser.cookies["push_console_session"] != nil)
        }
    }
}
