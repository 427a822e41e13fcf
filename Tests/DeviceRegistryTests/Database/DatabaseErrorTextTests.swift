import DeviceRegistry
import PostgresNIO
import TestSupport
import Testing

@Suite struct DatabaseErrorTextTests {
    /// A server error's SQLSTATE compares with postgres-nio's named codes.
    @Test func theSQLStateIsPostgresNIOsCode() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let insert: PostgresQuery = "INSERT INTO apps (code, name) VALUES ('wowa', 'Wowa')"
            try await client.query(insert)
            let error = try #require(await #expect(throws: PSQLError.self) { try await client.query(insert) })
            let state = try #require(DatabaseErrorText.sqlState(error))
            #expect(state == .uniqueViolation && state.isInClass(of: .integrityConstraintViolation) && !state.isInClass(of: .dataException))
            #expect(DatabaseErrorText.isServerError(error))
        }
    }

    /// A refused statement is not an outage; a session the server ended (57P01, as at a
    /// shutdown) is.
    @Test func outagesAreToldFromRefusedStatements() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let refused = try #require(await #expect(throws: PSQLError.self) { try await client.query("SELECT no_such_column FROM apps") })
            #expect(DatabaseErrorText.sqlState(refused)?.raw == "42703" && !DatabaseErrorText.isOutage(refused))
            let ended = try #require(
                await #expect(throws: PSQLError.self) {
                    for try await _ in try await client.query("SELECT pg_terminate_backend(pg_backend_pid())") {}
                })
            #expect(DatabaseErrorText.isOutage(ended), "\(String(reflecting: ended))")
        }
        struct Other: Error {}
        #expect(!DatabaseErrorText.isOutage(Other()))
    }

    @Test func anErrorNotFromTheDatabaseHasNoSQLState() {
        struct Other: Error {}
        #expect(
            DatabaseErrorText.sqlState(Other()) == nil && !DatabaseErrorText.isServerError(Other())
                && !DatabaseErrorText.isPoolError(Other()))
        #expect(PostgresError.Code.invalidParameterValue.isInClass(of: .dataException))
    }
}
