import Logging
import PostgresNIO

/// A transaction on one leased connection, in place of `PostgresClient.withTransaction`, whose
/// statements PostgresNIO can leave unanswered on a connection that has just closed (see
/// ``DatabaseStatement``): its ROLLBACK or COMMIT after the database went away hung the
/// worker's writer for good.
public struct DatabaseTransaction: Sendable {
    let connection: PostgresConnection
    let logger: Logger

    public static func run<T: Sendable>(
        _ client: PostgresClient, logger: Logger,
        _ body: (DatabaseTransaction) async throws -> T
    ) async throws -> T {
        try await client.withConnection { connection in
            try await run(on: connection, logger: logger, body)
        }
    }

    /// A transaction on a connection the caller holds (a session-level lock, a run of several).
    /// Whatever ends the body (a refused statement, an error of the caller's own, cancellation),
    /// the transaction is rolled back before the error goes on: the connection must not carry it
    /// into its next lease, holding its locks. On a lost connection the rollback fails at once
    /// (the server has ended the transaction with the session); a connection that fails to roll
    /// back is closed.
    nonisolated(nonsending) public static func run<T: Sendable>(
        on connection: PostgresConnection, logger: Logger,
        _ body: (DatabaseTransaction) async throws -> T
    ) async throws -> T {
        let transaction = DatabaseTransaction(connection: connection, logger: logger)
        try await transaction.query("BEGIN")
        do {
            let value = try await body(transaction)
            try await transaction.query("COMMIT")
            return value
        } catch {
            do {
                try await transaction.query("ROLLBACK")
            } catch {
                // Still in the transaction, or gone: either way the pool must not lease it again.
                try? await connection.close()
            }
            throw error
        }
    }

    @discardableResult
    public func query(_ query: PostgresQuery) async throws -> PostgresQueryResult {
        try await DatabaseStatement.run(query, on: connection, logger: logger)
    }
}
