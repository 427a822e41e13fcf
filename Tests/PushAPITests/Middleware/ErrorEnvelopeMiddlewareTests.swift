import DeviceRegistry
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import PostgresNIO
import TestSupport
import Testing

@testable import PushAPI

@Suite("Database errors in the envelope")
struct ErrorEnvelopeMiddlewareTests {
    /// A lost connection, found closed before the statement was sent or ended by the server under
    /// it (57P01, an error from the server), is a 503 DATABASE_UNAVAILABLE a client retries; a
    /// statement the server refused is a 500. The errors are PostgreSQL's and PostgresNIO's own.
    @Test(.timeLimit(.minutes(1)))
    func lostSessionsAre503AndRefusedStatementsAre500() async throws {
        let errors = try await TestPostgres.shared.makeDatabase().withClient { client in
            var errors = try await Self.errorsOfASessionEndedMidStatement(client)
            errors["refused"] = try await Self.error { try await DatabaseStatement.run("SELECT nope", on: client, logger: apiLogger) }
            return errors
        }
        #expect(errors["lost"] is DatabaseStatement.ConnectionLost)
        #expect(errors["ended"].flatMap(DatabaseErrorText.sqlState) == .adminShutdown)
        #expect(errors["refused"].flatMap(DatabaseErrorText.sqlState) == .undefinedColumn)

        let router = Router(context: APIRequestContext.self)
        router.add(middleware: ErrorEnvelopeMiddleware())
        router.get(":error") { _, context -> Response in throw errors[context.parameters.get("error") ?? ""]! }
        try await Application(router: router, logger: apiLogger).test(.router) { client in
            for (path, status, code) in [
                ("lost", 503, "DATABASE_UNAVAILABLE"), ("ended", 503, "DATABASE_UNAVAILABLE"), ("refused", 500, "INTERNAL"),
            ] {
                let answer = try await client.execute(uri: "/\(path)", method: .get)
                #expect(answer.status.code == status, "\(path)")
                #expect(answer.json["code"] as? String == code, "\(path)")
            }
        }
    }

    /// What a statement gets when pg_terminate_backend ends its session while it runs ("ended"),
    /// and the next statement on that connection, once it has closed ("lost").
    static func errorsOfASessionEndedMidStatement(_ client: PostgresClient) async throws -> [String: any Error] {
        try await client.withConnection { connection in
            let pid = try #require(try await DatabaseStatement.run("SELECT pg_backend_pid()", on: connection, logger: apiLogger).first)
                .decode(Int32.self)
            async let sleeping = error { try await DatabaseStatement.run("SELECT pg_sleep(30)", on: connection, logger: apiLogger) }
            while try await count(client, "SELECT count(*)::int FROM pg_stat_activity WHERE pid = \(pid) AND state = 'active'") == 0 {
                try await Task.sleep(for: .milliseconds(20))
            }
            try await DatabaseStatement.run("SELECT pg_terminate_backend(\(pid))", on: client, logger: apiLogger)
            let ended = try await sleeping
            try await connection.closeFuture.get()
            let lost = try await error { try await DatabaseStatement.run("SELECT 1", on: connection, logger: apiLogger) }
            return ["ended": ended, "lost": lost]
        }
    }

    /// The error `body` throws.
    static func error(_ body: () async throws -> Void) async throws -> any Error {
        do {
            try await body()
        } catch {
            return error
        }
        throw TestFailure("the statement succeeded")
    }
}
