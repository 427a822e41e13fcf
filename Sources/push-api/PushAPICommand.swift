import ArgumentParser
import DeviceRegistry
import Foundation
import Hummingbird
import Logging
import PushAPI
import ServiceSupport

@main
struct PushAPICommand: AsyncParsableCommand {
    static func main() async {
        ProgramStartup.runConcurrencyOnEventLoops()
        await main(nil)
    }

    static let configuration = CommandConfiguration(
        commandName: "push-api",
        abstract: "The device registration API and service endpoints.",
        discussion: """
            Configuration comes from the environment: DATABASE_URL (required; ?pooler=transaction behind a pooler \
            in transaction mode), DATABASE_READ_URL (a streaming standby the admin API's and the console's audit is \
            read from; writes stay on DATABASE_URL), JWT_SECRET (HS256, at \
            least 32 bytes) and/or JWT_PUBLIC_KEY_FILE (RSA or EC P-256 PEM), JWT_ISSUER, JWT_AUDIENCE, \
            LOGOUT_TOKEN_GRACE_SECONDS (how long after its exp an access token still signs a logout, default 604800), \
            PUSH_ADMIN_TOKEN (bearer token of the service/admin endpoints, at least 16 characters; unset: \
            they answer 404), API_HOST (default 127.0.0.1), API_PORT (default 8080), LOG_LEVEL (default info), \
            MAX_ACTIVE_DEVICES_PER_USER (active devices per user and app, default 20; beyond it the least recently \
            registered is deactivated), REGISTRATIONS_PER_USER_PER_MINUTE (default 10, per process; beyond it 429), \
            API_IDLE_TIMEOUT_SECONDS (a kept-alive connection with no request is closed after it, default 75), \
            API_READ_TIMEOUT_SECONDS (a request must arrive whole within it of its first byte, default 10), \
            API_MAX_CONNECTIONS (default 4096, or fewer under a lower open-files limit; at it the longest-waiting \
            connection without a request being answered is closed for each new one). \
            The options below override the environment.
            """)

    @Option(help: "Address to listen on (API_HOST).") var host: String?
    @Option(help: "Port to listen on (API_PORT).") var port: Int?
    @Option(help: "trace, debug, info, notice, warning, error or critical (LOG_LEVEL).") var logLevel: String?

    func run() async throws {
        var environment = ProcessInfo.processInfo.environment
        if let host { environment["API_HOST"] = host }
        if let port { environment["API_PORT"] = String(port) }
        if let logLevel { environment["LOG_LEVEL"] = logLevel }
        let succeeded = await ProgramStartup.run("push-api") {
            let configuration = try APIConfiguration.fromEnvironment(environment)
            ProgramStartup.bootstrapLogging(level: configuration.logLevel)
            let logger = Logger(label: "push-api")
            let app = try await buildApplication(configuration, logger: logger)
            // After every setting is checked: a configuration mistake is reported without a 5 s wait.
            try await DatabaseReachability.verify(url: configuration.databaseURL, logger: logger)
            if let readURL = configuration.readDatabaseURL { try await DatabaseReachability.verify(url: readURL, logger: logger) }
            try await ProgramStartup.listening(on: configuration.host, port: configuration.port, setting: "API_PORT") {
                try await app.runService()
            }
        }
        if !succeeded { throw ExitCode.failure }
    }
}
