import AsyncHTTPClient
import DeviceRegistry
import Logging
import NIOCore
import NIOSSL
import PostgresNIO
import ServiceLifecycle
import UnixSignals

/// Runs push-worker: the PostgreSQL client, the optional operations server and the dispatcher
/// in one ServiceGroup (shut down in reverse order: the dispatcher drains first), then closes
/// the HTTP client. Tests run this same function.
public func runWorker(_ configuration: DispatchConfiguration, logger: Logger, signals: [UnixSignal] = [.sigterm, .sigint]) async throws {
    let client = PostgresClient(configuration: try DatabaseConfiguration.parse(configuration.databaseURL), backgroundLogger: logger)
    let http = try makeHTTPClient(configuration)
    let metrics = DispatchMetrics()
    var services: [any Service] = [client]
    if let port = configuration.metricsPort {
        services.append(buildWorkerOperations(port: port, client: client, metrics: metrics, logger: logger))
    }
    services.append(Dispatcher(configuration: configuration, client: client, http: http, metrics: metrics, logger: logger))
    let group = ServiceGroup(configuration: .init(services: services, gracefulShutdownSignals: signals, logger: logger))
    logger.info("push-worker starting", metadata: [
        "push.fcm_base_url": "\(configuration.fcmBaseURL)", "push.token_url": "\(configuration.googleTokenURL)",
        "push.concurrency": "\(configuration.concurrency)", "push.lease_seconds": "\(configuration.lease.components.seconds)",
        "push.metrics_port": "\(configuration.metricsPort.map(String.init) ?? "off")", "push.worker": "\(configuration.workerName)",
    ])
    do {
        try await ProgramStartup.listening(on: workerOperationsHost, port: configuration.metricsPort ?? 0, setting: "METRICS_PORT") {
            try await group.run()
        }
    } catch {
        try? await http.shutdown()
        throw error
    }
    try await http.shutdown()
}

/// HTTP/2 over TLS when the server offers it, with PUSH_CA_FILE trusted in addition to the system roots.
func makeHTTPClient(_ configuration: DispatchConfiguration) throws -> HTTPClient {
    var tls = TLSConfiguration.makeClientConfiguration()
    if let caFile = configuration.caFile {
        tls.additionalTrustRoots = [.file(caFile)]
    }
    var http = HTTPClient.Configuration(tlsConfiguration: tls)
    http.httpVersion = .automatic
    http.timeout = .init(connect: .seconds(5), read: .nanoseconds(Int64(configuration.requestTimeout.components.seconds) * 1_000_000_000))
    // HTTP/1.1 fallback (plain http:// endpoints) needs many connections to keep up.
    http.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: min(configuration.concurrency, 64))
    return HTTPClient(eventLoopGroupProvider: .singleton, configuration: http)
}
