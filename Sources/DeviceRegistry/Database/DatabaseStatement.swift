import Logging
import NIOCore
import PostgresNIO

/// Runs one statement so that it always gets an answer or an error, whatever its connection
/// does. PostgresNIO 1.33.2 hands a statement to its connection with `channel.write(task,
/// promise: nil)` from the calling thread; NIO carries that write over to the event loop, and if
/// the connection closed meanwhile the loop has emptied the channel's pipeline by then: the
/// write fails into the nil promise and nothing ever completes the statement. Its caller waits
/// for good (cancellation cannot end a wait on an `EventLoopFuture`); after a database restart
/// that was push-worker's claim. Here the statement is handed over on the event loop itself,
/// once the channel is seen to be active: NIO empties a pipeline only in a later loop task,
/// after the channel went inactive, so PostgresNIO's handler is still there to answer the
/// statement or fail it when the connection goes. The rows are all read on the loop.
public enum DatabaseStatement {
    /// The connection had closed before the statement could be sent.
    public struct ConnectionLost: Error, CustomStringConvertible {
        public var description: String { "the database connection closed" }
    }

    /// Runs `query` on a connection leased from `client` for as long as its rows are read.
    @discardableResult
    public static func run(_ query: PostgresQuery, on client: PostgresClient, logger: Logger) async throws -> PostgresQueryResult {
        try await client.withConnection { connection in
            try await run(query, on: connection, logger: logger)
        }
    }

    /// Runs `query` on a connection the caller holds (a transaction's).
    @discardableResult
    public static func run(_ query: PostgresQuery, on connection: PostgresConnection, logger: Logger) async throws
        -> PostgresQueryResult
    {
        try await connection.eventLoop.flatSubmit { () -> EventLoopFuture<PostgresQueryResult> in
            guard !connection.isClosed else { return connection.eventLoop.makeFailedFuture(ConnectionLost()) }
            return connection.query(query, logger: logger)
        }.get()
    }

    /// Runs `query` on a connection leased from `client` and hands `body` its rows as they arrive,
    /// none held beyond the one being read: a long audit streams in constant memory. The
    /// connection stays leased until `body` returns.
    nonisolated(nonsending) public static func stream<Result: Sendable>(
        _ query: PostgresQuery, on client: PostgresClient, logger: Logger, _ body: (PostgresRowSequence) async throws -> Result
    ) async throws -> Result {
        try await client.withConnection { connection in
            try await stream(query, on: connection, logger: logger, body)
        }
    }

    /// Runs `query` on a connection the caller holds and hands `body` its rows as they arrive.
    nonisolated(nonsending) public static func stream<Result: Sendable>(
        _ query: PostgresQuery, on connection: PostgresConnection, logger: Logger, _ body: (PostgresRowSequence) async throws -> Result
    ) async throws -> Result {
        try await body(ConnectionLoop(connection.eventLoop).query(query, on: connection, logger: logger))
    }

    /// Runs `statement`, prepared once per connection (PostgresNIO keeps track), on a connection
    /// leased from `client` for as long as its rows are read.
    public static func run<Statement: PostgresPreparedStatement>(_ statement: Statement, on client: PostgresClient, logger: Logger)
        async throws -> [Statement.Row] where Statement.Row: Sendable
    {
        try await client.withConnection { connection in
            try await run(statement, on: connection, logger: logger)
        }
    }

    /// Runs `statement` prepared once per connection, or, where sessions do not last
    /// (``PoolerMode/transaction``), as an unnamed statement: Parse, Bind and Execute in one
    /// round trip that the pooler keeps on one server session (parsed and planned each time).
    public static func run<Statement: PostgresPreparedStatement>(
        _ statement: Statement, on client: PostgresClient, pooler: PoolerMode, logger: Logger
    ) async throws -> [Statement.Row] where Statement.Row: Sendable {
        guard !pooler.keepsSessionState else { return try await run(statement, on: client, logger: logger) }
        let query = PostgresQuery(unsafeSQL: Statement.sql, binds: try statement.makeBindings())
        return try await run(query, on: client, logger: logger).map { try statement.decodeRow($0) }
    }

    /// Runs `statement`, prepared once per connection, on a connection the caller holds.
    /// PostgresNIO keeps a failed preparation for the connection's life and fails every later
    /// run of the statement there with the same error: a statement first prepared before its
    /// tables or functions existed (a program started before `pushctl migrate`) would fail on
    /// that connection for good. The server refuses such a statement with SQLSTATE class 42
    /// (or 0A, 3F), never for its values: the connection is then closed, and the pool opens
    /// another.
    public static func run<Statement: PostgresPreparedStatement>(
        _ statement: Statement, on connection: PostgresConnection, logger: Logger
    ) async throws -> [Statement.Row] where Statement.Row: Sendable {
        do {
            return try await ConnectionLoop(connection.eventLoop).run(statement, on: connection, logger: logger)
        } catch {
            if let state = DatabaseErrorText.sqlState(error), Self.refusesTheText(state) { try? await connection.close() }
            throw error
        }
    }

    /// The statement's text, not its values, was refused: a syntax error, an object that does
    /// not exist, a feature not supported, a schema unknown.
    static func refusesTheText(_ state: PostgresError.Code) -> Bool {
        ["42", "0A", "3F"].contains(String(state.raw.prefix(2)))
    }
}

/// A connection's event loop as an actor's executor. Prepared statements and streamed rows have
/// only PostgresNIO's async API, which writes the statement from the thread it runs on; it is
/// nonisolated(nonsending) (PostgresNIO is built with NonisolatedNonsendingByDefault), so called
/// from here it runs on the loop, in the same loop task that saw the channel active, as
/// `DatabaseStatement` requires.
private actor ConnectionLoop {
    let eventLoop: any EventLoop

    init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    nonisolated var unownedExecutor: UnownedSerialExecutor { eventLoop.executor.asUnownedSerialExecutor() }

    func run<Statement: PostgresPreparedStatement>(_ statement: Statement, on connection: PostgresConnection, logger: Logger)
        async throws -> [Statement.Row] where Statement.Row: Sendable
    {
        guard !connection.isClosed else { throw DatabaseStatement.ConnectionLost() }
        var rows: [Statement.Row] = []
        for try await row in try await connection.execute(statement, logger: logger) { rows.append(row) }
        return rows
    }

    /// The rows are read by the caller, wherever it runs: only the statement's write must be here.
    func query(_ query: PostgresQuery, on connection: PostgresConnection, logger: Logger) async throws -> PostgresRowSequence {
        guard !connection.isClosed else { throw DatabaseStatement.ConnectionLost() }
        return try await connection.query(query, logger: logger)
    }
}
