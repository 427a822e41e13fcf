import DeviceRegistry
import Logging
import PostgresNIO
import ServiceSupport
import TestSupport
import Testing

/// What a caller hears from the database within its deadline, and after it: a statement sent
/// cannot be cancelled, so the deadline waits for it and reports what it then says truthfully.
@Suite("Database deadline")
struct DatabaseDeadlineTests {
    static let logger = Logger(label: "deadline-tests")

    func run(_ sql: String, within limit: Duration) async throws -> String {
        let database = try await TestPostgres.shared.makeDatabase()
        return try await database.withClient { client in
            try await Self.connect(client)
            return try await DatabaseDeadline(limit: limit).run {
                try await DatabaseTransaction.run(client, logger: Self.logger) { transaction in
                    try await transaction.query("SELECT set_config('statement_timeout', '1000', true)")
                    let rows = try await transaction.query(PostgresQuery(unsafeSQL: sql))
                    return try rows.first?.decode(String.self) ?? ""
                }
            }
        }
    }

    /// Opens the client's first connection before any deadline runs: opening it (a backend
    /// started for a database made a moment ago) can itself take longer than a 100 ms deadline
    /// on a busy machine, which is not what these tests are about.
    static func connect(_ client: PostgresClient) async throws {
        _ = try await DatabaseStatement.run("SELECT 1", on: client, logger: logger)
    }

    @Test func anAnswerAfterTheDeadlineIsStillTheAnswer() async throws {
        #expect(try await run("SELECT 'late' FROM pg_sleep(0.4)", within: .milliseconds(100)) == "late")
    }

    @Test func aRefusalAfterTheDeadlineIsTheRefusalNotAnOutage() async throws {
        await #expect {
            _ = try await run("SELECT (pg_sleep(0.4)::text || 'x')::int::text", within: .milliseconds(100))
        } throws: { error in
            !(error is DatabaseUnavailable) && DatabaseErrorText.describe(error).contains("invalid input syntax for type integer")
        }
    }

    /// JobDirectory reads the functions' refusals as EnqueueRejected: late, that is still the answer.
    @Test func aRefusalTheCallerReadAfterTheDeadlineIsStillTheRefusal() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        try await database.withClient { client in
            try await Self.connect(client)
            await #expect(throws: EnqueueRejected(description: "unknown app code \"nope\"", parameter: .appCode)) {
                try await DatabaseDeadline(limit: .milliseconds(100)).run {
                    _ = try await DatabaseStatement.run("SELECT pg_sleep(0.4)", on: client, logger: Self.logger)
                    throw EnqueueRejected(description: "unknown app code \"nope\"", parameter: .appCode)
                }
            }
        }
    }

    @Test func aStatementTheServerStoppedAtItsTimeoutIsUnavailable() async throws {
        await #expect(throws: DatabaseUnavailable.self) {
            _ = try await run("SELECT pg_sleep(5)::text", within: .milliseconds(100))
        }
    }
}
