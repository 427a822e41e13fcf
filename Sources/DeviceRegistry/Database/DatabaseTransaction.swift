import Logging
import PostgresNIO

/// A transaction on one leased connection, in place of `PostgresClient.withTransaction`:
/// PostgresNIO writes a statement sent on a connection that has just closed into the dead
/// channel and never answers it. `withTransaction`'s ROLLBACK or COMMIT after the database went
/// away hung the worker's writer for good (one database restart in ten, measured). So every
/// statement here first checks that the connection is open, and a lost connection leaves the
/// rollback to the server, which ends a transaction with its session; after a server error the
/// connection is alive and rolls back.
public struct DatabaseTransaction: Sendable {
    let connection: PostgresConnection
    let logger: Logger

    /// The connection closed under the transaction: nothing of it was committed, unless the
    /// COMMIT itself was on its way (then the caller's retry must be idempotent).
    public struct ConnectionLost: Error, CustomStringConvertible {
        public var description: String { "the database connection closed during a transaction" }
    }

    public static func run<T: Sendable>(
        _ client: PostgresClient, logger: Logger,
        _ body: (DatabaseTransaction) async throws -> T
    ) async throws -> T {
        try await client.withConnection { connection in
            let transaction = DatabaseTransaction(connection: connection, logger: logger)
            try await transaction.query("BEGIN")
            do {
                let value = try await body(transaction)
                try await transaction.query("COMMIT")
                return value
            } catch {
                if DatabaseErrorText.isServerError(error) && !connection.isClosed {
                    _ = try? await connection.query("ROLLBACK", logger: logger)
                }
                throw error
            }
        }
    }

    @discardableResult
    public func query(_ query: PostgresQuery) async throws -> PostgresRowSequence {
        guard !connection.isClosed else { throw ConnectionLost() }
        return try await connection.query(query, logger: logger)
    }
}
