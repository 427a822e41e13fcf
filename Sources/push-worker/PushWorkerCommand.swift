import ArgumentParser
import DeviceRegistry
import Foundation
import Logging
import PushDispatch
import ServiceSupport

@main
struct PushWorkerCommand: AsyncParsableCommand {
    static func main() async {
        ProgramStartup.runConcurrencyOnEventLoops()
        await main(nil)
    }

    static let configuration = CommandConfiguration(
        commandName: "push-worker",
        abstract: "Claims queued push jobs and delivers them through FCM HTTP v1.",
        discussion: """
            Configuration comes from the environment: DATABASE_URL (required; ?pooler=transaction behind a pooler in \
            transaction mode), DATABASE_LISTEN_URL (a direct connection for LISTEN when DATABASE_URL goes through such \
            a pooler; without it new jobs are found by polling, within 1 s), FCM_BASE_URL (default \
            https://fcm.googleapis.com), GOOGLE_TOKEN_URL (default https://oauth2.googleapis.com/token), \
            PUSH_CA_FILE (extra trusted CA, PEM), WORKER_CONCURRENCY (FCM requests in flight, default 1024), \
            WORKER_LEASE_SECONDS (default 30: a crashed worker's deliveries are taken over after this), \
            FCM_REQUEST_TIMEOUT_SECONDS (an FCM send's deadline, default 30), \
            NEW_KEY_GRACE_SECONDS (how long after a key's first use Google's invalid_grant is waited for \
            rather than failing the app's jobs, default 180: new keys take a minute or more to be accepted), \
            DELIVERY_RETENTION_DAYS (days of the delivery log kept, default 30, or off: older days are dropped \
            daily with their ended jobs), \
            METRICS_PORT (serves /metrics, /healthz, /readyz when set), METRICS_HOST (their address, default \
            0.0.0.0), LOG_LEVEL (default info). \
            SIGTERM or SIGINT: stop claiming, finish in-flight sends, record them, hand deliveries claimed \
            and not sent yet to the next worker at once, exit.
            """)

    @Option(help: "FCM requests in flight (WORKER_CONCURRENCY).") var concurrency: Int?
    @Option(help: "Serve /metrics, /healthz, /readyz on this port (METRICS_PORT).") var metricsPort: Int?
    @Option(help: "Address to serve them on (METRICS_HOST).") var metricsHost: String?
    @Option(help: "trace, debug, info, notice, warning, error or critical (LOG_LEVEL).") var logLevel: String?

    func run() async throws {
        var environment = ProcessInfo.processInfo.environment
        if let concurrency { environment["WORKER_CONCURRENCY"] = String(concurrency) }
        if let metricsPort { environment["METRICS_PORT"] = String(metricsPort) }
        if let metricsHost { environment["METRICS_HOST"] = metricsHost }
        if let logLevel { environment["LOG_LEVEL"] = logLevel }
        let succeeded = await ProgramStartup.run("push-worker") {
            let configuration = try DispatchConfiguration.fromEnvironment(environment)
            ProgramStartup.bootstrapLogging(level: configuration.logLevel)
            let logger = Logger(label: "push-worker")
            try await DatabaseReachability.verify(url: configuration.databaseURL, logger: logger)
            if let listenURL = configuration.listenURL { try await DatabaseReachability.verify(url: listenURL, logger: logger) }
            try await runWorker(configuration, logger: logger)
        }
        if !succeeded { throw ExitCode.failure }
    }
}
