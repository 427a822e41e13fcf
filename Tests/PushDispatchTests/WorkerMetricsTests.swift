import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import PostgresNIO
import TestSupport
import Testing

@testable import PushDispatch

@Suite("push-worker operations endpoints")
struct WorkerMetricsTests {
    @Test func metricsHealthAndReadinessOnMetricsPort() async throws {
        try await WorkerFixture.with { fixture in
            fixture.emulator.script(token: "tok-dead", .unregistered)
            try await fixture.register(["tok-live-1", "tok-live-2", "tok-dead"])
            var configuration = fixture.configuration
            let port = try LocalCluster.freePort()
            configuration.metricsPort = port
            let job = try await fixture.enqueue(users: [1, 2, 3])
            let (metrics, health, ready, heads) = try await fixture.withWorker(configuration) {
                () async throws -> (String, UInt, UInt, [String]) in
                _ = try await fixture.finished(job)
                func get(_ path: String, method: HTTPMethod = .GET) async throws -> (UInt, String) {
                    var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)\(path)")
                    request.method = method
                    let response = try await HTTPClient.shared.execute(request, timeout: .seconds(5))
                    return (response.status.code, String(buffer: try await response.body.collect(upTo: 1 << 20)))
                }
                // HEAD: the status, no body.
                let heads = [try await get("/healthz", method: .HEAD), try await get("/readyz", method: .HEAD)].map { "\($0.0) \($0.1)" }
                return (try await get("/metrics").1, try await get("/healthz").0, try await get("/readyz").0, heads)
            }
            #expect(health == 200 && ready == 200)
            #expect(heads == ["200 ", "200 "])
            #expect(metrics.contains(#"push_sends_total{app="wowa",outcome="sent"} 2"#))
            #expect(metrics.contains(#"push_sends_total{app="wowa",outcome="UNREGISTERED"} 1"#))
            #expect(metrics.contains("push_fcm_request_duration_seconds_count 3"))
            #expect(metrics.contains("push_oauth_token_refreshes_total 1"))
            #expect(metrics.contains("push_queue_pending_deliveries"))
            #expect(metrics.contains("push_oldest_due_job_age_seconds"))
        }
    }

    /// The queue gauges' next measurement waits in proportion to what the last one cost the
    /// database, measured by the server: a measurement that waited for a connection (all busy,
    /// or the database just back from an outage) is not taken for an expensive count, which
    /// froze the gauges for up to a minute after an outage.
    @Test func theQueueDepthsCostIsTheServersTimeNotTheWaitForAConnection() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        try await TestPostgres.withClient(url: database.url(poolMax: 1)) { client in
            let queue = DeliveryQueue(client: client, worker: "gauge", lease: .seconds(30), logger: workerLogger)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { for try await _ in try await client.query("SELECT pg_sleep(2)") {} }
                try await Task.sleep(for: .milliseconds(300))
                let started = ContinuousClock.now
                let (_, _, took) = try await queue.depth()
                #expect(ContinuousClock.now - started > .seconds(1), "the one connection was not busy")
                #expect(took < .milliseconds(500), "\(took)")
                try await group.waitForAll()
            }
        }
    }

    /// METRICS_HOST picks the address: on 127.0.0.2 (loopback, but not 127.0.0.1) the endpoints
    /// answer there and nothing listens on 127.0.0.1.
    @Test func servedOnMetricsHostOnly() async throws {
        try await WorkerFixture.with { fixture in
            var configuration = fixture.configuration
            let port = try LocalCluster.freePort()
            configuration.metricsPort = port
            configuration.metricsHost = "127.0.0.2"
            let (onHost, onOther) = try await fixture.withWorker(configuration) { () async throws -> (UInt?, UInt?) in
                func health(at host: String) async -> UInt? {
                    let request = HTTPClientRequest(url: "http://\(host):\(port)/healthz")
                    return try? await HTTPClient.shared.execute(request, timeout: .seconds(5)).status.code
                }
                return (await health(at: "127.0.0.2"), await health(at: "127.0.0.1"))
            }
            #expect(onHost == 200)
            #expect(onOther == nil)
        }
    }
}
