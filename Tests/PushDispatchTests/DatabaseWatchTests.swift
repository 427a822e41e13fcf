import Testing

@testable import PushDispatch

/// The worker's one warning for a database outage and one notice for its end, from when a ping
/// was last answered.
@Suite("Database watch")
struct DatabaseWatchTests {
    let start = ContinuousClock.now
    func at(_ seconds: Int) -> ContinuousClock.Instant { start + .seconds(seconds) }

    @Test func oneWarningOnceSilentForTenSecondsAndOneNoticeWhenItAnswers() {
        var watch = DatabaseWatch()
        #expect(watch.observed(lastAnswer: at(0), error: nil, now: at(5)) == nil)
        // One ping may have waited behind a busy pool: nothing yet.
        #expect(watch.observed(lastAnswer: at(0), error: "connection refused", now: at(9)) == nil)
        let warning = watch.observed(lastAnswer: at(0), error: "connection refused", now: at(10))
        #expect(warning?.level == .warning && warning?.message.hasPrefix("database not answering") == true)
        #expect(warning?.metadata["push.error"] == "connection refused")
        // The outage goes on: no more lines.
        for second in stride(from: 15, through: 60, by: 5) {
            #expect(watch.observed(lastAnswer: at(0), error: "connection refused", now: at(second)) == nil)
        }
        let back = watch.observed(lastAnswer: at(62), error: nil, now: at(65))
        #expect(back == DatabaseWatch.Line(level: .notice, message: "database answers again", metadata: ["push.unavailable_seconds": "62"]))
        #expect(watch.observed(lastAnswer: at(67), error: nil, now: at(70)) == nil)
    }

    /// A database that froze answers nothing and refuses nothing: its ping never returns, and
    /// the silence alone is the news.
    @Test func aPingThatNeverReturnsIsWarnedAboutByItsSilence() {
        var watch = DatabaseWatch()
        let warning = watch.observed(lastAnswer: at(0), error: nil, now: at(12))
        #expect(warning?.metadata["push.error"] == "no answer for 12 s")
    }
}
