import DeviceRegistry
import Foundation
import Hummingbird
import Logging
import PostgresNIO
import Prometheus
import ServiceSupport

/// Builds push-api: the PostgreSQL client runs as a service of the application, so it starts
/// before the server answers and stops after it. Tests call this same function.
public func buildApplication(_ configuration: APIConfiguration, logger: Logger) async throws -> some ApplicationProtocol {
    let postgres = try DatabaseConfiguration.parse(configuration.databaseURL)
    let verifier = try await UserTokenVerifier(configuration.jwt)
    let client = PostgresClient(configuration: postgres, backgroundLogger: logger)
    let readClient = try configuration.readDatabaseURL.map {
        PostgresClient(configuration: try DatabaseConfiguration.parse($0), backgroundLogger: logger)
    }
    let registry = DeviceDirectory(client: client, pooler: try DatabaseConfiguration.pooler(configuration.databaseURL))
    let metrics = RequestMetrics(registry: PrometheusCollectorRegistry())
    let registrations = RegistrationBatcher(
        registry: registry, lanes: postgres.options.maximumConnections,
        deadline: configuration.databaseDeadline, limits: configuration.registrationLimits, logger: logger,
        batchSizes: { metrics.recordRegistrationBatch(size: $0) })
    let router = try buildRouter(
        client: client, audit: readClient.map { .replica($0) } ?? .primary(client), registry: registry, registrations: registrations,
        metrics: metrics, verifier: verifier,
        adminToken: configuration.adminToken,
        deadline: DatabaseDeadline(limit: configuration.databaseDeadline), logger: logger)
    let connections = try ConnectionLimits(
        configuration, databaseConnections: postgres.options.maximumConnections,
        openFilesLimit: OpenFilesLimit.raiseToHardLimit())
    // Services stop in reverse order: the server first, then the batcher its requests use.
    return Application(
        router: router,
        server: connections.server(logger: logger),
        configuration: .init(
            address: .hostname(configuration.host, port: configuration.port), serverName: "push-api",
            availableConnectionsDelegate: connections.listenerLimit(logger: logger)),
        services: [client] + (readClient.map { [$0] } ?? []) + [registrations],
        // Once listening: a startup that fails (no database) stays one clear line.
        onServerRunning: { _ in
            logger.info(
                "connections bounded",
                metadata: [
                    "maximum": "\(connections.maximumConnections)", "open_files_limit": "\(connections.openFilesLimit)",
                    "idle_timeout_s": "\(connections.idleTimeout.components.seconds)",
                    "read_timeout_s": "\(connections.readTimeout.components.seconds)",
                ])
        },
        logger: logger)
}

func buildRouter(
    client: PostgresClient, audit: AuditSource, registry: DeviceDirectory, registrations: RegistrationBatcher, metrics: RequestMetrics,
    verifier: UserTokenVerifier, adminToken: String?, deadline: DatabaseDeadline,
    logger: Logger
) throws -> Router<APIRequestContext> {
    guard let documentURL = Bundle.module.url(forResource: "openapi", withExtension: "yaml"),
        let document = try? Data(contentsOf: documentURL)
    else {
        throw ConfigurationError.missing("the bundled openapi.yaml")
    }
    let router = Router(context: APIRequestContext.self)
    router.middlewares.add(RequestLogMiddleware())
    router.middlewares.add(RequestMetricsMiddleware(metrics: metrics))
    router.middlewares.add(ResponseHeadersMiddleware())
    router.middlewares.add(ErrorEnvelopeMiddleware())

    OperationsController(client: client, metrics: metrics, openAPIDocument: ByteBuffer(data: document))
        .addRoutes(to: router)
    let knownApps = KnownApps(directory: AppDirectory(client: client, logger: logger), deadline: deadline)
    DeviceController(registry: registry, registrations: registrations, deadline: deadline)
        .addRoutes(to: router.group("push/devices").add(middleware: AppUserAuthenticator(verifier: verifier, knownApps: knownApps)))
    let admin = AdminAuthenticator(token: adminToken)
    AdminController(jobs: { JobDirectory(client: client, logger: $0) }, audit: audit, deadline: deadline)
        .addRoutes(
            notifications: router.group("push/notifications").add(middleware: admin),
            admin: router.group("admin").add(middleware: admin))
    // The console exists only with an admin token: without one, /console is an unknown path.
    if let adminToken {
        ConsoleController(
            client: client, audit: audit, sessions: ConsoleSessions(adminToken: adminToken),
            signOuts: ConsoleSignOuts(client: client, logger: logger), throttle: SignInThrottle(),
            pages: try ConsolePages(), deadline: deadline
        )
        .addRoutes(to: router.group("console"))
    }
    return router
}
