import Testing

@testable import PushDispatch

/// The worker's one warning for a database outage and one notice for its end.
@Suite("Database watch")
struct DatabaseWatchTests {
    let start = ContinuousClock.now
    func at(_ seconds: Int) -> ContinuousClock.Instant { start + .seconds(seconds) }

    @Test func oneWarningAfterTwoUnansweredPingsAndOneNoticeWhenItAnswers() {
        var watch = DatabaseWatch()
        #expect(watch.pinged(answered: true, now: at(0)) == nil)
        // One unanswered ping may have waited behind a busy pool: nothing yet.
        #expect(watch.pinged(answered: false, error: "connection refused", now: at(5)) == nil)
        let warning = watch.pinged(answered: false, error: "connection refused", now: at(10))
        #expect(warning?.level == .warning && warning?.message.hasPrefix("database not answering") == true)
        #expect(warning?.metadata["push.error"] == "connection refused")
        // The outage goes on: no more lines.
        for second in stride(from: 15, through: 60, by: 5) {
            #expect(watch.pinged(answered: false, error: "connection refused", now: at(second)) == nil)
        }
        let back = watch.pinged(answered: true, now: at(65))
        #expect(back == DatabaseWatch.Line(level: .notice, message: "database answers again", metadata: ["push.unavailable_seconds": "60"]))
        #expect(watch.pinged(answered: true, now: at(70)) == nil)
    }

    @Test func aSingleUnansweredPingSaysNothingEitherWay() {
        var watch = DatabaseWatch()
        #expect(watch.pinged(answered: false, now: at(0)) == nil)
        #expect(watch.pinged(answered: true, now: at(5)) == nil)
        #expect(watch.pinged(answered: false, now: at(10)) == nil)
    }
}
