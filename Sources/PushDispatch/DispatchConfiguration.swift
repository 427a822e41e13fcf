import DeviceRegistry
import FCMTransport
import Foundation
import Logging
import ServiceSupport

/// push-worker's settings (see the configuration table in docs/operating.md).
public struct DispatchConfiguration: Sendable {
    public var databaseURL: String
    /// A direct connection for LISTEN when `databaseURL` goes through a pooler in transaction
    /// mode (see ``JobWakeUps``).
    public var listenURL: String?
    public var fcmBaseURL: String = "https://fcm.googleapis.com"
    public var googleTokenURL: String = "https://oauth2.googleapis.com/token"
    public var caFile: String?
    /// Most FCM requests in flight in this process. FCM's per-project quota (600,000 a minute,
    /// 10,000/s) at a 50–100 ms round trip needs 500–1,000 in flight; 256 held one worker to
    /// 2,500–5,000/s. Larger claims also cost fewer statements per delivery.
    public var concurrency: Int = 1024
    public var metricsPort: Int?
    /// Every interface by default: probes and Prometheus scrape from outside the pod or host.
    public var metricsHost: String = "0.0.0.0"
    public var logLevel: Logger.Level = .info
    /// How long a claimed delivery stays ours without a heartbeat: a crashed worker's work is
    /// taken over after at most this long.
    public var lease: Duration = .seconds(30)
    /// The token endpoint's request deadline.
    public var requestTimeout: Duration = .seconds(10)
    /// An FCM send's deadline. A send that times out may still have been delivered, and is sent
    /// again: the deadline sits well above FCM's slow tail (seconds) so that the tail does not
    /// become duplicates; dead connections are found sooner by PING. It also bounds a graceful
    /// shutdown's drain.
    public var fcmRequestTimeout: Duration = .seconds(30)
    /// How long a graceful shutdown may drain: a token request and a send, twice (a 401's
    /// refresh and retry), and a few seconds to write. Past it the worker stops waiting (its
    /// database connections are closed under any query that hangs); what it had not recorded is
    /// settled by another worker when the leases run out. Deployments give the worker this
    /// long plus ``cancellationBound`` to stop before they kill it.
    public var drainBound: Duration { (requestTimeout + fcmRequestTimeout) * 2 + .seconds(5) }
    /// How long the worker may take to stop once the drain bound passed; then it aborts.
    public static let cancellationBound: Duration = .seconds(5)
    public var maxAttempts: Int = 5
    /// How long deliveries wait for an unavailable token endpoint before their jobs fail: FCM's
    /// own retries are bounded by attempts, these (which spend none) by time.
    public var longestTokenOutage: Duration = .seconds(3600)
    /// How long after its first use a key's `invalid_grant` is waited for rather than failing its
    /// jobs: Google takes a minute or more to accept a new key everywhere.
    public var newKeyGrace: Duration = .seconds(180)
    /// How long deliveries wait, spending no attempt, while FCM cannot be reached at all.
    public var longestFCMOutage: Duration = .seconds(3600)
    /// How often every worker looks for due jobs and retries whatever NOTIFY says: a job
    /// queued without a LISTEN to hear it (``JobWakeUps/polling``) waits at most this long.
    public var pollInterval: Duration = .seconds(1)
    /// How long the delivery log keeps a day: older days are dropped once a day, with their ended
    /// jobs (``DeliveryPartitionMaintenance``).
    public var deliveryRetention: DeliveryRetention = .standard
    public var workerName: String = "\(ProcessInfo.processInfo.hostName):\(ProcessInfo.processInfo.processIdentifier)"

    public init(databaseURL: String) {
        self.databaseURL = databaseURL
    }

    /// Every environment variable push-worker reads.
    public static let environmentVariables: Set<String> = [
        "DATABASE_URL", "DATABASE_LISTEN_URL", "FCM_BASE_URL", "GOOGLE_TOKEN_URL", "PUSH_CA_FILE", "WORKER_CONCURRENCY", "METRICS_PORT",
        "METRICS_HOST",
        "WORKER_LEASE_SECONDS", "FCM_REQUEST_TIMEOUT_SECONDS", "NEW_KEY_GRACE_SECONDS", "DELIVERY_RETENTION_DAYS", "LOG_LEVEL",
    ]

    public static func fromEnvironment(_ environment: [String: String]) throws(ConfigurationError) -> DispatchConfiguration {
        let settings = EnvironmentSettings(environment, declared: environmentVariables)
        var configuration = DispatchConfiguration(databaseURL: try settings.required("DATABASE_URL"))
        if let url = settings.value("DATABASE_LISTEN_URL") {
            let pooler: PoolerMode
            do {
                pooler = try DatabaseConfiguration.pooler(url)
            } catch {
                throw .invalid("DATABASE_LISTEN_URL", error.reason)
            }
            guard pooler.keepsSessionState else {
                throw .invalid("DATABASE_LISTEN_URL", "LISTEN needs a session that lasts: a direct connection, not ?pooler=transaction")
            }
            configuration.listenURL = url
        }
        if let url = settings.value("FCM_BASE_URL") { configuration.fcmBaseURL = url }
        if let url = settings.value("GOOGLE_TOKEN_URL") { configuration.googleTokenURL = url }
        // Sends are HTTP/2 over TLS, as FCM speaks them; the token endpoint may be any http(s) URL.
        _ = try FCMEndpoint.parse(configuration.fcmBaseURL)
        guard let parsed = URL(string: configuration.googleTokenURL), ["http", "https"].contains(parsed.scheme ?? ""), parsed.host != nil
        else {
            throw .invalid("GOOGLE_TOKEN_URL", "'\(configuration.googleTokenURL)' is not an http(s) URL")
        }
        if let path = settings.value("PUSH_CA_FILE") {
            guard FileManager.default.isReadableFile(atPath: path) else { throw .invalid("PUSH_CA_FILE", "\(path) cannot be read") }
            configuration.caFile = path
        }
        if let concurrency = try settings.integer("WORKER_CONCURRENCY", in: 1...10_000) { configuration.concurrency = concurrency }
        configuration.metricsPort = try settings.integer("METRICS_PORT", in: 0...65535)
        if let host = settings.value("METRICS_HOST") { configuration.metricsHost = host }
        if let lease = try settings.integer("WORKER_LEASE_SECONDS", in: 5...3600) { configuration.lease = .seconds(lease) }
        if let timeout = try settings.integer("FCM_REQUEST_TIMEOUT_SECONDS", in: 1...300) {
            configuration.fcmRequestTimeout = .seconds(timeout)
        }
        if let grace = try settings.integer("NEW_KEY_GRACE_SECONDS", in: 0...3600) { configuration.newKeyGrace = .seconds(grace) }
        configuration.deliveryRetention = try settings.deliveryRetention()
        if let level = try settings.logLevel() { configuration.logLevel = level }
        return configuration
    }
}

extension FCMEndpoint {
    /// FCM_BASE_URL's endpoint, or the configuration error that names it.
    static func parse(_ url: String) throws(ConfigurationError) -> FCMEndpoint {
        guard let endpoint = FCMEndpoint(url) else { throw .invalid("FCM_BASE_URL", "'\(url)' is not an https URL") }
        return endpoint
    }
}
