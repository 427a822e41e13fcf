import Hummingbird
import Prometheus
import Synchronization

/// Request counts and latency per route and status, in the application's own Prometheus
/// registry (not the process-global MetricsSystem), so each application instance — and each
/// test — has its own figures.
final class RequestMetrics: Sendable {
    let registry: PrometheusCollectorRegistry
    private let durations: Mutex<[String: DurationHistogram]> = Mutex([:])
    private let counters: Mutex<[String: Counter]> = Mutex([:])
    private static let buckets: [Duration] = [
        .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25),
        .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2.5),
    ]

    /// Registrations per database statement (`RegistrationBatcher`): above 1 only under load.
    private let registrationBatchSize: ValueHistogram

    init(registry: PrometheusCollectorRegistry) {
        self.registry = registry
        registrationBatchSize = registry.makeValueHistogram(
            descriptor: MetricNameDescriptor(
                metricName: "registration_batch", unitName: "size", helpText: "registrations per database statement"),
            buckets: [1, 2, 4, 8, 16, 32, 64])
    }

    func recordRegistrationBatch(size: Int) {
        registrationBatchSize.record(Double(size))
    }

    func record(route: String, method: String, status: Int, duration: Duration) {
        let statusLabel = String(status)
        let counterKey = "\(method) \(route) \(statusLabel)"
        let counter = counters.withLock { counters in
            if let counter = counters[counterKey] { return counter }
            let counter = registry.makeCounter(
                descriptor: MetricNameDescriptor(
                    metricName: "http_requests", unitName: "total", helpText: "requests answered, by route and status"),
                labels: [("method", method), ("route", route), ("status", statusLabel)])
            counters[counterKey] = counter
            return counter
        }
        counter.increment()
        let histogramKey = "\(method) \(route)"
        let histogram = durations.withLock { durations in
            if let histogram = durations[histogramKey] { return histogram }
            let histogram = registry.makeDurationHistogram(
                descriptor: MetricNameDescriptor(
                    metricName: "http_request_duration", unitName: "seconds", helpText: "time to answer, by route"),
                labels: [("method", method), ("route", route)], buckets: Self.buckets)
            durations[histogramKey] = histogram
            return histogram
        }
        histogram.recordNanoseconds(Int64(duration.components.seconds) * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000)
    }

    func text() -> String {
        var buffer: [UInt8] = []
        registry.emit(into: &buffer)
        return String(decoding: buffer, as: UTF8.self)
    }
}

/// Runs outside the error envelope middleware, so it records the final status of every request.
struct RequestMetricsMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: RequestMetrics

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let start = ContinuousClock.now
        let response = try await next(request, context)
        // Unmatched paths share one label so that scanners cannot blow up the label set.
        metrics.record(
            route: context.endpointPath ?? "unmatched", method: request.method.rawValue,
            status: response.status.code, duration: ContinuousClock.now - start)
        return response
    }
}
