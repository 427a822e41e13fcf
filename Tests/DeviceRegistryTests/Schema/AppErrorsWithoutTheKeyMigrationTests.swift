import DeviceRegistry
import PostgresNIO
import TestSupport
import Testing

/// Migration 026: a row of apps that breaks a rule is refused with the rule named, never with
/// the row ("Failing row contains (…)"), which held the app's FCM private key and went to the
/// client and into the server's log. Each statement here is one an operator might type.
@Suite("Migration 026: apps' errors without the key")
struct AppErrorsWithoutTheKeyMigrationTests {
    static let key = "-----BEGIN PRIVATE KEY-----not-a-real-key-but-a-secret-all-the-same"

    @Test(arguments: [
        ("UPDATE apps SET max_sends_per_second = 0", "23514", "app wowa: max_sends_per_second is a positive number"),
        ("UPDATE apps SET name = NULL", "23502", "an app needs its id, code, name, created_at and updated_at (app wowa)"),
        ("UPDATE apps SET name = ''", "23514", "app wowa: its name is 1 to 200 characters, not 0"),
        ("UPDATE apps SET code = 'Not A Code'", "23514", "an app's code is 1 to 64 characters of a-z, 0-9, _ and -"),
        ("UPDATE apps SET fcm_client_email = NULL", "23514", "app wowa: its FCM credentials come as a set"),
        ("UPDATE apps SET updated_at = NULL", "23502", "an app needs its id, code, name, created_at and updated_at (app wowa)"),
    ])
    func aRefusedRowOfAppsNamesTheRuleNotTheRow(statement: String, state: String, message: String) async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            try await client.query(
                """
                INSERT INTO apps (code, name, fcm_project_id, fcm_client_email, fcm_private_key, max_sends_per_second)
                VALUES ('wowa', 'Wowa', 'wowa-project', 'push@wowa-project.iam.gserviceaccount.com', \(Self.key), 50)
                """)
            await #expect {
                try await client.query(PostgresQuery(unsafeSQL: statement))
            } throws: { error in
                let info = (error as? PSQLError)?.serverInfo
                let said = [info?[.message], info?[.detail], info?[.hint]].compactMap { $0 }.joined(separator: " | ")
                return DatabaseErrorText.sqlState(error)?.raw == state && DatabaseErrorText.describe(error).hasPrefix(message)
                    && !said.contains("PRIVATE KEY") && !said.contains("secret")
            }
            var rows: [String] = []
            for try await (code, name, rate) in try await client.query("SELECT code, name, max_sends_per_second FROM apps").decode(
                (String, String, Int32).self)
            {
                rows.append("\(code) \(name) \(rate)")
            }
            #expect(rows == ["wowa Wowa 50"])
        }
    }

    @Test func aNewAppWithoutAnIdOrWithHalfItsCredentialsIsRefusedAndAGoodOneTaken() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            await #expect {
                try await client.query("INSERT INTO apps (id, code, name) VALUES (NULL, 'wowa', 'Wowa')")
            } throws: { DatabaseErrorText.sqlState($0)?.raw == "23502" }
            await #expect {
                try await client.query("INSERT INTO apps (code, name, fcm_private_key) VALUES ('wowa', 'Wowa', \(Self.key))")
            } throws: { error in
                DatabaseErrorText.describe(error).hasPrefix("app wowa: its FCM credentials come as a set")
                    && (error as? PSQLError)?.serverInfo?[.detail] == nil
            }
            try await client.query("INSERT INTO apps (code, name) VALUES ('wowa', 'Wowa')")
            #expect(try await count(client, "SELECT count(*)::int FROM apps") == 1)
        }
    }
}
