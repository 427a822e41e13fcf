import DeviceRegistry
import Logging
import PostgresNIO
import TestSupport
import Testing

/// A statement on a connection the server has just ended gets an error at once: PostgresNIO
/// alone would leave it unanswered for good (push-worker stalled after one database restart in
/// about twenty-five).
@Suite(.timeLimit(.minutes(1))) struct DatabaseStatementTests {
    let logger = Logger(label: "test")

    /// The race lost every time: the connection is used only after its channel is fully closed.
    @Test func aConnectionTheServerEndedFailsTheStatementAtOnce() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            try await client.withConnection { connection in
                try await endFromTheServer(connection, client: client)
                await #expect(throws: DatabaseStatement.ConnectionLost.self) {
                    try await DatabaseStatement.run("SELECT 1", on: connection, logger: logger)
                }
                let error = try #require(
                    await #expect(throws: DatabaseStatement.ConnectionLost.self) {
                        try await DatabaseTransaction.run(client, logger: logger) { _ in
                            try await DatabaseStatement.run("SELECT 1", on: connection, logger: logger)
                        }
                    })
                #expect(DatabaseErrorText.isOutage(error))
            }
            // The pool replaced it: the next statement is answered.
            let answer = try #require(try await DatabaseStatement.run("SELECT 41 + 1", on: client, logger: logger).first)
            #expect(try answer.decode(Int.self) == 42)
        }
    }

    /// A prepared statement is prepared once per connection under its name, its rows come back
    /// whole and in order, and on a connection the server has ended it fails at once, as a query does.
    @Test func aPreparedStatementIsPreparedOnceAndFailsAtOnceOnAnEndedConnection() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            #expect(try await DatabaseStatement.run(SeriesStatement(through: 1000), on: client, logger: logger) == Array(1...1000))
            try await client.withConnection { connection in
                #expect(try await DatabaseStatement.run(SeriesStatement(through: 2), on: connection, logger: logger) == [1, 2])
                #expect(try await DatabaseStatement.run(SeriesStatement(through: 3), on: connection, logger: logger) == [1, 2, 3])
                let prepared = try await DatabaseStatement.run("SELECT name FROM pg_prepared_statements", on: connection, logger: logger)
                #expect(try prepared.map { try $0.decode(String.self) } == [SeriesStatement.name])

                try await endFromTheServer(connection, client: client)
                await #expect(throws: DatabaseStatement.ConnectionLost.self) {
                    try await DatabaseStatement.run(SeriesStatement(through: 1), on: connection, logger: logger)
                }
            }
        }
    }

    /// A statement prepared before its table existed (a program started before the migrations)
    /// works once the table is there: the connection that kept the failed preparation is closed
    /// and the pool's next one prepares it anew. Kept, every later run on it failed for good.
    @Test func aPreparationRefusedForAMissingTableIsNotKept() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        try await TestPostgres.withClient(url: database.url(poolMax: 1)) { client in
            let error = try #require(
                await #expect(throws: PSQLError.self) {
                    try await DatabaseStatement.run(LaterTableStatement(), on: client, logger: logger)
                })
            #expect(DatabaseErrorText.sqlState(error) == .undefinedTable)
            try await DatabaseStatement.run("CREATE TABLE later_table (n int)", on: client, logger: logger)
            try await DatabaseStatement.run("INSERT INTO later_table VALUES (7)", on: client, logger: logger)
            #expect(try await DatabaseStatement.run(LaterTableStatement(), on: client, logger: logger) == [7])
        }
    }

    /// Streamed rows come in order as the body reads them, the connection held until it returns;
    /// on a connection the server has ended the stream fails at once, as a query does.
    @Test func streamedRowsComeInOrderAndFailAtOnceOnAnEndedConnection() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let read = try await DatabaseStatement.stream("SELECT g FROM generate_series(1, 10000) g", on: client, logger: logger) { rows in
                var read: [Int] = []
                for try await g in rows.decode(Int.self) { read.append(g) }
                return read
            }
            #expect(read == Array(1...10000))
            try await client.withConnection { connection in
                try await endFromTheServer(connection, client: client)
                await #expect(throws: DatabaseStatement.ConnectionLost.self) {
                    try await DatabaseStatement.stream("SELECT 1", on: connection, logger: logger) { rows in
                        for try await _ in rows {}
                    }
                }
            }
        }
    }

    /// Rows come back whole, in order, and a refused statement is the server's error, its
    /// transaction rolled back.
    @Test func answersAndRefusalsAreThoseOfTheServer() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let rows = try await DatabaseStatement.run("SELECT g FROM generate_series(1, 1000) g", on: client, logger: logger)
            #expect(try rows.map { try $0.decode(Int.self) } == Array(1...1000))
            let refused = try #require(
                await #expect(throws: PSQLError.self) {
                    try await DatabaseTransaction.run(client, logger: logger) { transaction in
                        try await transaction.query("INSERT INTO apps (code, name) VALUES ('kept', 'Kept')")
                        try await transaction.query("SELECT no_such_column FROM apps")
                    }
                })
            #expect(DatabaseErrorText.sqlState(refused)?.raw == "42703")
            let apps = try await DatabaseStatement.run("SELECT count(*) FROM apps WHERE code = 'kept'", on: client, logger: logger)
            #expect(try apps.first?.decode(Int.self) == 0)
        }
    }

    /// Has the server end `connection`'s session, as a restart or an operator would, and waits
    /// until its channel is fully closed: the race a statement then loses every time.
    func endFromTheServer(_ connection: PostgresConnection, client: PostgresClient) async throws {
        let pid = try #require(try await DatabaseStatement.run("SELECT pg_backend_pid()", on: connection, logger: logger).first)
            .decode(Int32.self)
        try await DatabaseStatement.run("SELECT pg_terminate_backend(\(pid))", on: client, logger: logger)
        try await connection.closeFuture.get()
    }

    struct SeriesStatement: PostgresPreparedStatement {
        static let name = "test_series"
        static let sql = "SELECT g FROM generate_series(1, $1) g"
        typealias Row = Int

        let through: Int

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 1)
            bindings.append(through)
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row {
            try row.decode(Int.self)
        }
    }
}

/// Reads a table the test makes only after a first, refused run.
struct LaterTableStatement: PostgresPreparedStatement {
    static let sql = "SELECT n FROM later_table"
    typealias Row = Int
    func makeBindings() -> PostgresBindings { PostgresBindings() }
    func decodeRow(_ row: PostgresRow) throws -> Int { try row.decode(Int.self) }
}
