import DeviceRegistry
import Logging
import PostgresNIO
import TestSupport
import Testing

@Suite("Transactions on a leased connection")
struct DatabaseTransactionTests {
    private struct CallersOwn: Error {}

    /// Whatever ends the body, the transaction is rolled back before its connection goes back to
    /// the pool. With a pool of one connection, the next statement runs on that same connection:
    /// inside a transaction left open it would still see the body's insert as its own (before,
    /// only a server error rolled back, and an error of the caller's own left the transaction
    /// open, with its locks, for the connection's next lease).
    @Test(arguments: ["the caller's own error", "a refused statement"])
    func everyErrorRollsTheTransactionBack(_ ending: String) async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let url = database.url(poolMax: 1)
        try await TestPostgres.withClient(url: url) { client in
            try await client.query("CREATE TABLE rolled_back (n int PRIMARY KEY)")
            await #expect(throws: (any Error).self) {
                try await DatabaseTransaction.run(client, logger: Logger(label: "test")) { transaction in
                    try await transaction.query("INSERT INTO rolled_back VALUES (1)")
                    if ending == "a refused statement" {
                        try await transaction.query("INSERT INTO rolled_back VALUES (1)")
                    }
                    throw CallersOwn()
                }
            }
            let rows = try await client.query("SELECT count(*)::int, txid_current_if_assigned() FROM rolled_back").collect()
            let (count, openTransaction) = try rows[0].decode((Int, Int64?).self)
            #expect(count == 0 && openTransaction == nil)
        }
    }
}
