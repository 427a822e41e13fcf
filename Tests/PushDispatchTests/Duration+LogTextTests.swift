import Testing

@testable import PushDispatch

@Suite("Durations in log lines")
struct DurationLogTextTests {
    @Test func aWaitWorkedOutFromTheClockIsLoggedToTheMillisecond() {
        #expect("\(Duration.nanoseconds(999_994_943).toTheMillisecond)" == "1.0 seconds")
        #expect("\(Duration.nanoseconds(1_999_996_244).toTheMillisecond)" == "2.0 seconds")
        #expect("\(Duration.nanoseconds(250_400_000).toTheMillisecond)" == "0.25 seconds")
        #expect(Duration.seconds(60).toTheMillisecond == .seconds(60))
        #expect(Duration.zero.toTheMillisecond == .zero)
    }
}
