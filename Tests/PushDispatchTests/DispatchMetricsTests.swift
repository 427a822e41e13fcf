import DeviceRegistry
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

    /// FCM's codes, and newer ones like them, label the sends as they are; a proxy's text in the
    /// status field does not make a series per answer.
    @Test func anErrorCodeLabelsItsSendsOnlyWhenItLooksLikeOne() {
        for code in ["UNREGISTERED", "HTTP_302", "SOMETHING_NEW", "QUOTA_EXCEEDED"] {
            #expect(DispatchMetrics.outcome(DeliveryErrorCode(rawValue: code)) == code)
        }
        for code in ["HELLO WORLD", "bad\u{FFFD}", "", "_X", "lower_case", "A\"B", String(repeating: "A", count: 65)] {
            #expect(DispatchMetrics.outcome(DeliveryErrorCode(rawValue: code)) == "OTHER")
        }
    }
}
