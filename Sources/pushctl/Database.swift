import DeviceRegistry
import Logging
import PostgresNIO
import ServiceSupport

/// Runs `body` with a connected client: the client's run loop lives in a child task for exactly
/// as long as the command needs it. An unreachable database is reported in one line.
func withDatabase<T: Sendable>(_ options: DatabaseOptions, _ body: (PostgresClient, Logger) async throws -> T) async throws -> T {
    let url = try options.resolvedURL()
    let configuration: PostgresClient.Configuration
    do {
        configuration = try DatabaseConfiguration.parse(url)
    } catch let error as DatabaseURLError {
        throw CLIError(error.description)
    }
    let logger = try options.logger()
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
