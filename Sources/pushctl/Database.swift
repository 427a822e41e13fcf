import DeviceRegistry
import Foundation
import Logging
import PostgresNIO
import ServiceSupport

/// Runs `body` with a connected client: the client's run loop lives in a child task for exactly
/// as long as the command needs it. An unreachable database is reported in one line.
func withDatabase<T: Sendable>(_ options: DatabaseOptions, _ body: (PostgresClient, Logger) async throws -> T) async throws -> T {
    try await withDatabase(url: try options.resolvedURL(), setting: "DATABASE_URL", logger: try options.logger(), body)
}

/// Runs `body` with the audit's source: the standby of `--database-read-url` or
/// DATABASE_READ_URL when given (its lag written to stderr first, so that stdout stays the
/// listing), else the primary.
func withAuditDatabase<T: Sendable>(_ options: AuditDatabaseOptions, _ body: (AuditSource, Logger) async throws -> T) async throws -> T {
    guard let readURL = options.resolvedReadURL() else {
        return try await withDatabase(options.database) { client, logger in try await body(.primary(client), logger) }
    }
    return try await withDatabase(url: readURL, setting: "DATABASE_READ_URL", logger: try options.database.logger()) { client, logger in
        let source = AuditSource.replica(client)
        if let lag = try await source.lag(logger: logger) {
            FileHandle.standardError.write(Data("pushctl: read from the standby (DATABASE_READ_URL): \(lag)\n".utf8))
        }
        return try await body(source, logger)
    }
}

private func withDatabase<T: Sendable>(
    url: String, setting: String, logger: Logger, _ body: (PostgresClient, Logger) async throws -> T
) async throws -> T {
    let configuration: PostgresClient.Configuration
    do {
        configuration = try DatabaseConfiguration.parse(url)
    } catch let error as DatabaseURLError {
        throw CLIError("\(setting): \(error.reason)")
    }
    do {
        try await DatabaseReachability.verify(url: url, logger: logger)
    } catch {
        throw CLIError("\(error)")
    }
    // The pool's own chatter (reconnects, early leases) is not for an operator's terminal.
    var backgroundLogger = logger
    backgroundLogger.logLevel = .critical
    let client = PostgresClient(configuration: configuration, backgroundLogger: backgroundLogger)
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { await client.run() }
        defer { group.cancelAll() }
        return try await body(client, logger)
    }
}
