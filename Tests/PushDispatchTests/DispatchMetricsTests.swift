import Testing

@testable import PushDispatch

@Suite("The worker's metrics")
struct DispatchMetricsTests {
    /// The queue is measured every 5 s while measuring is cheap (or failed: zero), at most 2.5 %
    /// of the time once it is not (a large campaign's audience, counted device by device), and at
    /// least once a minute.
    @Test func theQueueIsMeasuredLessOftenAsMeasuringCostsMore() {
        #expect(DispatchMetrics.pauseAfterMeasuringQueue(took: .zero) == .seconds(5))
        #expect(DispatchMetrics.pauseAfterMeasuringQueue(took: .milliseconds(125)) == .seconds(5))
        #expect(DispatchMetrics.pauseAfterMeasuringQueue(took: .milliseconds(225)) == .seconds(9))
        #expect(DispatchMetrics.pauseAfterMeasuringQueue(took: .seconds(1)) == .seconds(40))
        #expect(DispatchMetrics.pauseAfterMeasuringQueue(took: .seconds(30)) == .seconds(60))
    }
}
