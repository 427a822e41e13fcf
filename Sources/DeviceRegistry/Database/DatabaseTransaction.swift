import Logging
import PostgresNIO

/// A transaction on one leased connection, in place of `PostgresClient.withTransaction`, whose
/// statements PostgresNIO can leave unanswered on a connection that has just closed (see
/// ``DatabaseStatement``): its ROLLBACK or COMMIT after the database went away hung the
/// worker's writer for good. A lost connection leaves the rollback to the server, which ends a
/// transaction with its session; after a server error the connection is alive and rolls back.
public struct DatabaseTransaction: Sendable {
    let connection: PostgresConnection
    let logger: Logger

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
                if DatabaseErrorText.isServerError(error) {
                    _ = try? await transaction.query("ROLLBACK")
                }
                throw error
            }
        }
    }

    @discardableResult
    public func query(_ query: PostgresQuery) async throws -> PostgresQueryResult {
        try await DatabaseStatement.run(query, on: connection, logger: logger)
    }
}
