import DeviceRegistry
import Prometheus
import Synchronization

/// The worker's Prometheus figures: sends by app and outcome, FCM latency, OAuth refreshes,
/// queue depth and the age of the oldest due job.
public final class DispatchMetrics: Sendable {
    public let registry: PrometheusCollectorRegistry
    private struct SendsKey: Hashable {
        let app: String
        let outcome: String
    }

    private let sends = Mutex<[SendsKey: Counter]>([:])
    let fcmLatency: DurationHistogram
    let oauthRefreshes: Counter
    let queueDepth: Gauge
    let oldestDueJobAge: Gauge

    public init(registry: PrometheusCollectorRegistry = PrometheusCollectorRegistry()) {
        self.registry = registry
        fcmLatency = registry.makeDurationHistogram(
            descriptor: .init(metricName: "push_fcm_request_duration", unitName: "seconds", helpText: "FCM messages:send round trips"),
            buckets: [
                .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50), .milliseconds(100),
                .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2.5), .seconds(5), .seconds(10),
            ])
        oauthRefreshes = registry.makeCounter(
            descriptor: .init(
                metricName: "push_oauth_token_refreshes", unitName: "total", helpText: "access tokens minted at the token endpoint"))
        queueDepth = registry.makeGauge(
            descriptor: .init(
                metricName: "push_queue_pending_deliveries", unitName: "", helpText: "deliveries waiting to be sent"))
        oldestDueJobAge = registry.makeGauge(
            descriptor: .init(
                metricName: "push_oldest_due_job_age", unitName: "seconds", helpText: "age of the oldest due, unfinished job"))
    }

    /// The pause after a measurement of the queue that took `cost` (zero when it failed): 5 s,
    /// or 40 times that when longer, at most a minute. Counting the devices of audiences not
    /// expanded yet reads each of them (about 1 ms per 1,000; 225 ms a measurement during a
    /// 200,000-device campaign, measured), so the gauges cost each worker at most 2.5 % of a
    /// database core up to audiences of ~1.5 million devices, and stay at most a minute old.
    static func pauseAfterMeasuringQueue(took cost: Duration) -> Duration {
        min(.seconds(60), max(.seconds(5), cost * 40))
    }

    /// A delivery's error code as the `outcome` label: FCM's codes (and newer ones like them,
    /// `UPPER_CASE`) as they are; anything else a server answered becomes `OTHER`, so that a
    /// proxy's text cannot make a series of its own per answer.
    static func outcome(_ code: DeliveryErrorCode) -> String {
        let text = code.rawValue.utf8
        let looksLikeACode =
            (1...64).contains(text.count) && text.first.map(capitals.contains) == true && text.allSatisfy(codeBytes.contains)
        return looksLikeACode ? code.rawValue : "OTHER"
    }

    private static let capitals = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZ".utf8)
    private static let codeBytes = capitals.union("0123456789_".utf8)

    func countSend(app: String, outcome: String, times: Int = 1) {
        let key = SendsKey(app: app, outcome: outcome)
        let counter = sends.withLock { counters in
            if let counter = counters[key] { return counter }
            let counter = registry.makeCounter(
                descriptor: .init(metricName: "push_sends", unitName: "total", helpText: "FCM sends by app and outcome"),
                labels: [("app", app), ("outcome", outcome)])
            counters[key] = counter
            return counter
        }
        counter.increment(by: Int64(times))
    }

    public func text() -> String {
        var buffer: [UInt8] = []
        registry.emit(into: &buffer)
        return String(decoding: buffer, as: UTF8.self)
    }
}
