import Logging
import PostgresNIO

/// The database could not be reached: one line for an operator, naming where and why.
public struct DatabaseUnreachable: Error, CustomStringConvertible {
    public let target: String
    public let reason: String
    public var description: String { "cannot reach the database at \(target): \(reason)" }
}

/// Checks, before a program starts its work, that the database answers: a wrong host, port,
/// password or database name is one clear line at startup, not a stream of retries.
public enum DatabaseReachability {
    /// `SELECT 1` through `client`, whose `run()` must be going, within `limit` (the pool keeps
    /// retrying the connection meanwhile, so a database still starting up is waited for). Also
    /// what `/readyz` asks.
    public static func ping(_ client: PostgresClient, within limit: Duration, logger: Logger) async throws {
        try await DatabaseDeadline(limit: limit).run { _ = try await client.query("SELECT 1", logger: logger) }
    }

    /// `ping`, its failure one line naming the database.
    public static func verify(_ client: PostgresClient, configuration: PostgresClient.Configuration,
                              limit: Duration = .seconds(5), logger: Logger) async throws(DatabaseUnreachable) {
        do {
            try await ping(client, within: limit, logger: logger)
        } catch {
            let target = configuration.host.map { "\($0):\(configuration.port ?? 5432)" } ?? configuration.unixSocketPath ?? "?"
            let reason = error is DatabaseUnavailable ? "no connection within \(limit)" : DatabaseErrorText.describe(error)
            throw DatabaseUnreachable(target: target, reason: reason)
        }
    }

    /// The same with a client of its own, closed afterwards.
    public static func verify(url: String, limit: Duration = .seconds(5), logger: Logger) async throws {
        let configuration = try DatabaseConfiguration.parse(url)
        // The pool's own retry chatter is not for the operator: the one line below says it all.
        var quiet = logger
        quiet.logLevel = .critical
        let client = PostgresClient(configuration: configuration, backgroundLogger: quiet)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            try await verify(client, configuration: configuration, limit: limit, logger: quiet)
        }
    }
}
