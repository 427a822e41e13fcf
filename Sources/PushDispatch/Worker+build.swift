import AsyncHTTPClient
import DeviceRegistry
import FCMTransport
import Logging
import NIOCore
import NIOSSL
import PostgresNIO
import ServiceLifecycle
import ServiceSupport
import UnixSignals

/// Runs push-worker as one ServiceGroup: the PostgreSQL client, the token endpoint's HTTP
/// client, the FCM connections, the optional operations server, the delivery log's upkeep and
/// the dispatcher. The group shuts its services down in reverse order, so the dispatcher drains
/// first and the clients it sends through close after it. Tests run this same function.
public func runWorker(_ configuration: DispatchConfiguration, logger: Logger, signals: [UnixSignal] = [.sigterm, .sigint]) async throws {
    let client = PostgresClient(configuration: try DatabaseConfiguration.parse(configuration.databaseURL), backgroundLogger: logger)
    let pooler = try DatabaseConfiguration.pooler(configuration.databaseURL)
    let wakeUps = JobWakeUps(databasePooler: pooler, listenURL: configuration.listenURL)
    let tls = makeTLSConfiguration(configuration)
    // The FCM client connects on its first send. The HTTP client must be shut down once made:
    // made after the last step that can throw, it is the group's to shut down from here on.
    let fcm = try makeFCMClient(configuration, tls: tls)
    let http = makeHTTPClient(configuration, tls: tls)
    let metrics = DispatchMetrics()
    var services: [any Service] = [client, HTTPClientService(client: http), fcm]
    if let port = configuration.metricsPort {
        services.append(
            buildWorkerOperations(host: configuration.metricsHost, port: port, client: client, metrics: metrics, logger: logger))
    }
    services.append(DeliveryPartitionMaintenance(client: client, retention: configuration.deliveryRetention, logger: logger))
    services.append(
        Dispatcher(
            configuration: configuration, wakeUps: wakeUps, client: client, pooler: pooler, http: http, fcm: fcm, metrics: metrics,
            logger: logger))
    var groupConfiguration = ServiceGroupConfiguration(services: services, gracefulShutdownSignals: signals, logger: logger)
    // A shutdown ends whatever FCM and the database do: a drain that outlasts its bound is
    // escalated to cancellation (the clients close their connections, so no query or send
    // hangs on), and a cancellation that outlasts its own bound aborts the process.
    groupConfiguration.maximumGracefulShutdownDuration = configuration.drainBound
    groupConfiguration.maximumCancellationDuration = DispatchConfiguration.cancellationBound
    let group = ServiceGroup(configuration: groupConfiguration)
    logger.info(
        "push-worker starting",
        metadata: [
            "push.fcm_base_url": "\(configuration.fcmBaseURL)", "push.token_url": "\(configuration.googleTokenURL)",
            "push.concurrency": "\(configuration.concurrency)", "push.lease_seconds": "\(configuration.lease.components.seconds)",
            "push.metrics_port": "\(configuration.metricsPort.map(String.init) ?? "off")", "push.worker": "\(configuration.workerName)",
            "push.job_wakeups": "\(wakeUps.summary)", "push.delivery_retention": "\(configuration.deliveryRetention)",
        ])
    if wakeUps == .polling {
        logger.notice(
            "no LISTEN through a pooler in transaction mode: new jobs are found by polling, within the poll interval; set DATABASE_LISTEN_URL to a direct connection to hear them at once",
            metadata: ["push.poll_interval": "\(configuration.pollInterval)"])
    }
    try await ProgramStartup.listening(on: configuration.metricsHost, port: configuration.metricsPort ?? 0, setting: "METRICS_PORT") {
        try await group.run()
    }
}

/// PUSH_CA_FILE trusted in addition to the system roots, for FCM and the token endpoint.
func makeTLSConfiguration(_ configuration: DispatchConfiguration) -> TLSConfiguration {
    var tls = TLSConfiguration.makeClientConfiguration()
    if let caFile = configuration.caFile {
        tls.additionalTrustRoots = [.file(caFile)]
    }
    return tls
}

/// The token endpoint's client (a request per access token, so about one an hour per app).
func makeHTTPClient(_ configuration: DispatchConfiguration, tls: TLSConfiguration) -> HTTPClient {
    var http = HTTPClient.Configuration(tlsConfiguration: tls)
    http.timeout = .init(connect: .seconds(5), read: .init(configuration.requestTimeout))
    return HTTPClient(eventLoopGroupProvider: .singleton, configuration: http)
}

/// The sends' client: HTTP/2 over TLS to FCM_BASE_URL.
func makeFCMClient(_ configuration: DispatchConfiguration, tls: TLSConfiguration) throws -> FCMClient {
    let pool = try FCMConnectionPool(
        endpoint: FCMEndpoint.parse(configuration.fcmBaseURL), concurrency: configuration.concurrency,
        tlsConfiguration: tls)
    // One connection (FCM allows 100 streams on each) for high-priority sends: never queued
    // behind a campaign's requests in a connection's buffers and the server's reading of it.
    let express = try FCMConnectionPool(
        endpoint: FCMEndpoint.parse(configuration.fcmBaseURL),
        concurrency: min(configuration.concurrency, FCMClient.expressConcurrency), tlsConfiguration: tls)
    return FCMClient(pool: pool, expressPool: express, timeout: configuration.fcmRequestTimeout)
}
