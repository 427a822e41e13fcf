import ArgumentParser
import Foundation
import Hummingbird
import Logging
import PushAPI

@main
struct PushAPICommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "push-api",
        abstract: "The device registration API and service endpoints.",
        discussion: """
            Configuration comes from the environment: DATABASE_URL (required), JWT_SECRET (HS256, at \
            least 32 bytes) and/or JWT_PUBLIC_KEY_FILE (RSA or EC P-256 PEM), JWT_ISSUER, JWT_AUDIENCE, \
            API_HOST (default 127.0.0.1), API_PORT (default 8080), LOG_LEVEL (default info). \
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
        do {
            let configuration = try APIConfiguration.fromEnvironment(environment)
            LoggingSystem.bootstrap { label in
                var handler = StreamLogHandler.standardError(label: label)
                handler.logLevel = configuration.logLevel
                return handler
            }
            let logger = Logger(label: "push-api")
            let app = try await buildApplication(configuration, logger: logger)
            try await app.runService()
        } catch let error as any CustomStringConvertible & Error {
            // One clear line and a non-zero exit, not a stack trace.
            FileHandle.standardError.write(Data("push-api: \(error.description)\n".utf8))
            throw ExitCode.failure
        }
    }
}
