import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import ServiceLifecycle

/// A stand-in for FCM HTTP v1 and Google's OAuth 2 token endpoint: a real HTTP/1.1 + HTTP/2 server over TLS
/// on loopback, for tests, benchmarks and developers of client backends.
///
/// Tests use ``withRunning(_:logger:_:)``; long-running processes add the emulator to a `ServiceGroup`
/// (it is a `Service`) or call ``runService()``.
public struct FCMEmulator: Service {
    public struct Configuration: Sendable {
        public var host: String
        /// 0 picks a free port; read it from ``RunningEmulator/port``.
        public var port: Int
        /// TLS with ALPN h2 and http/1.1 when true; plain HTTP/1.1 when false.
        public var tls: Bool
        public var tokenLifetime: Duration
        /// Accounts allowed to mint tokens from the start.
        public var serviceAccounts: [RegisteredAccount]
        /// Outcomes chosen by token prefix; ``PrefixRule/standard`` holds the executable's defaults.
        public var prefixRules: [PrefixRule]
        /// How many accepted messages (bodies) are kept for inspection; counters are kept for every token.
        public var retainedMessageLimit: Int
        /// Where to write the CA certificate (PEM). Nil writes it to a fresh temporary directory that is removed
        /// when the emulator stops.
        public var caFilePath: String?
        /// An HTTP/2 connection gets GOAWAY after this many streams, as Google's front ends end
        /// connections now and then; nil never does. Changeable while running.
        public var streamsPerConnection: Int?
        /// The SETTINGS_MAX_CONCURRENT_STREAMS HTTP/2 connections advertise (at least 1); streams
        /// beyond it are refused with RST_STREAM REFUSED_STREAM. Changeable while running.
        public var maxConcurrentStreams: Int
        /// How long sends wait before they are answered; nil: at once. Only sends that are
        /// delivered wait, and a scripted `slow` outcome's delay wins. Changeable while running.
        public var latency: LatencyProfile?

        public init(
            host: String = "127.0.0.1",
            port: Int = 0,
            tls: Bool = true,
            tokenLifetime: Duration = .seconds(3600),
            serviceAccounts: [RegisteredAccount] = [],
            prefixRules: [PrefixRule] = [],
            retainedMessageLimit: Int = 1000,
            caFilePath: String? = nil,
            streamsPerConnection: Int? = nil,
            maxConcurrentStreams: Int = 100,
            latency: LatencyProfile? = nil
        ) {
            self.host = host
            self.port = port
            self.tls = tls
            self.tokenLifetime = tokenLifetime
            self.serviceAccounts = serviceAccounts
            self.prefixRules = prefixRules
            self.retainedMessageLimit = retainedMessageLimit
            self.caFilePath = caFilePath
            self.streamsPerConnection = streamsPerConnection
            self.maxConcurrentStreams = maxConcurrentStreams
            self.latency = latency
        }
    }

    public let configuration: Configuration
    private let logger: Logger
    private let onRunning: @Sendable (RunningEmulator) async -> Void
    private let core: EmulatorCore

    /// `onRunning` is called once the server listens, with the handle to script and inspect it.
    public init(
        configuration: Configuration = Configuration(),
        logger: Logger = Logger(label: "fcm-emulator"),
        onRunning: @escaping @Sendable (RunningEmulator) async -> Void = { _ in }
    ) {
        self.configuration = configuration
        self.logger = logger
        self.onRunning = onRunning
        self.core = EmulatorCore(configuration: configuration)
    }

    /// Serves until cancelled or gracefully shut down by the enclosing `ServiceGroup`.
    public func run() async throws {
        let certificates = try configuration.tls ? LoopbackCertificates.generate(extraHost: configuration.host) : nil
        let caFile = try certificates.map { try CertificateAuthorityFile.write($0.caCertificatePEM, to: configuration.caFilePath) }
        defer { caFile?.removeIfTemporary() }

        let scheme = configuration.tls ? "https" : "http"
        let send = SendEndpoint(
            registry: core.registry, ledger: core.ledger, latency: core.latency, messageIDs: core.messageIDs,
            answers: try CannedAnswers.load(), logger: logger)
        let router = EmulatorRoutes.router(core: core, send: send, scheme: scheme, logger: logger).buildResponder()
        let advertisedHost = Self.advertisedHost(for: configuration.host)
        let applicationConfiguration = ApplicationConfiguration(address: .hostname(configuration.host, port: configuration.port))
        let onServerRunning: @Sendable (any Channel) async -> Void = { [core, configuration, logger, onRunning] channel in
            let port = channel.localAddress?.port ?? configuration.port
            let running = RunningEmulator(
                core: core,
                baseURL: "\(scheme)://\(advertisedHost):\(port)",
                port: port,
                caCertificatePEM: certificates?.caCertificatePEM,
                caFilePath: caFile?.path
            )
            logger.info("FCM emulator listening", metadata: ["base_url": "\(running.baseURL)"])
            await onRunning(running)
        }
        let app = Application(
            responder: router,
            server: HTTPServerBuilder { responder in
                try EmulatorServerChannel(
                    tlsConfiguration: certificates?.serverTLSConfiguration, send: send, policy: core.http2Policy,
                    outage: core.outage, router: router, responder: responder)
            },
            configuration: applicationConfiguration,
            onServerRunning: onServerRunning,
            logger: logger
        )
        try await app.run()
    }

    /// Runs until SIGTERM or SIGINT, then shuts down gracefully.
    public func runService() async throws {
        try await ServiceGroup(services: [self], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger).run()
    }

    /// Starts an emulator, runs `body` with it, and stops it when `body` returns or throws.
    @discardableResult
    public static func withRunning<Value>(
        _ configuration: Configuration = Configuration(),
        logger: Logger = Logger(label: "fcm-emulator"),
        _ body: (RunningEmulator) async throws -> Value
    ) async throws -> Value {
        let (started, startedContinuation) = AsyncStream.makeStream(of: RunningEmulator.self)
        let emulator = FCMEmulator(configuration: configuration, logger: logger) { running in
            startedContinuation.yield(running)
            startedContinuation.finish()
        }
        var serviceGroupConfiguration = ServiceGroupConfiguration(services: [emulator], logger: logger)
        // Clients that keep connections open past the body would otherwise hold the shutdown forever.
        serviceGroupConfiguration.maximumGracefulShutdownDuration = .seconds(5)
        let serviceGroup = ServiceGroup(configuration: serviceGroupConfiguration)
        return try await withThrowingTaskGroup(of: Void.self, returning: Value.self) { group in
            group.addTask {
                // Ends the wait below if the server fails before it listens (e.g. the port is taken).
                defer { startedContinuation.finish() }
                try await serviceGroup.run()
            }
            var iterator = started.makeAsyncIterator()
            guard let running = await iterator.next() else {
                try await group.next()
                throw FCMEmulatorError.stoppedBeforeListening
            }
            let result: Value
            do {
                result = try await body(running)
            } catch {
                await serviceGroup.triggerGracefulShutdown()
                throw error
            }
            // Graceful, so that in-flight answers are written and nothing logs a cancellation.
            await serviceGroup.triggerGracefulShutdown()
            try await group.waitForAll()
            return result
        }
    }

    private static func advertisedHost(for host: String) -> String {
        switch host {
        case "", "0.0.0.0", "::": "127.0.0.1"
        case let ipv6 where ipv6.contains(":"): "[\(ipv6)]"
        default: host
        }
    }
}

public enum FCMEmulatorError: Error, Equatable {
    /// The server task ended without ever listening and without an error of its own.
    case stoppedBeforeListening
}

/// The state every endpoint shares.
final class EmulatorCore: Sendable {
    let registry: AccountRegistry
    let ledger: DeliveryLedger
    let tokenFaults = TokenEndpointFaults()
    let messageIDs = MessageIDGenerator()
    let http2Policy: HTTP2ConnectionPolicy
    let latency: LatencySetting
    let outage: OutageSwitch

    init(configuration: FCMEmulator.Configuration) {
        registry = AccountRegistry(tokenLifetime: configuration.tokenLifetime)
        http2Policy = HTTP2ConnectionPolicy(
            streamsPerConnection: configuration.streamsPerConnection,
            maxConcurrentStreams: configuration.maxConcurrentStreams)
        latency = LatencySetting(configuration.latency)
        ledger = DeliveryLedger(prefixRules: configuration.prefixRules, retainedMessageLimit: configuration.retainedMessageLimit)
        outage = OutageSwitch(ledger: ledger)
        for account in configuration.serviceAccounts {
            registry.register(account)
        }
    }

    /// Scripts, counters, retained messages, access tokens and token-endpoint faults; accounts stay registered.
    func reset() {
        ledger.reset()
        registry.revokeAccessTokens()
        tokenFaults.failNext(count: 0, status: .serviceUnavailable)
    }
}

/// Wires the endpoints to their paths.
enum EmulatorRoutes {
    static func router(core: EmulatorCore, send: SendEndpoint, scheme: String, logger: Logger) -> Router<BasicRequestContext> {
        let router = Router()
        let tokenEndpoint = TokenEndpoint(registry: core.registry, ledger: core.ledger, faults: core.tokenFaults, scheme: scheme)
        router.post(RouterPath(TokenEndpoint.path)) { request, _ in
            await tokenEndpoint.respond(to: request)
        }
        router.post(RouterPath(SendEndpoint.path)) { request, context in
            await send.respond(to: request, projectID: context.parameters.get("project") ?? "")
        }
        AdminAPI(core: core).register(on: router)
        return router
    }
}

/// The CA certificate file clients trust (`PUSH_CA_FILE`).
struct CertificateAuthorityFile {
    let path: String
    /// Set when the file lives in a directory the emulator created and must remove.
    let temporaryDirectory: URL?

    static func write(_ pem: String, to path: String?) throws -> CertificateAuthorityFile {
        if let path {
            try Data(pem.utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
            return CertificateAuthorityFile(path: path, temporaryDirectory: nil)
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("fcm-emulator-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let file = directory.appendingPathComponent("ca.pem")
        try Data(pem.utf8).write(to: file, options: .atomic)
        return CertificateAuthorityFile(path: file.path, temporaryDirectory: directory)
    }

    func removeIfTemporary() {
        guard let temporaryDirectory else { return }
        try? FileManager.default.removeItem(at: temporaryDirectory)
    }
}
