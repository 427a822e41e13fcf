import DeviceRegistry
import Foundation
import Logging
import PostgresNIO
import TestSupport
import Testing

@Suite("Migrations")
struct MigrationRunnerTests {
    @Test func freshRunAppliesEverythingAndARerunNothing() async throws {
        let runner = try MigrationRunner.bundled()
        #expect(runner.migrations.map(\.version).starts(with: ["001_apps", "002_push_devices"]))
        try await TestPostgres.shared.makeEmptyDatabase().withClient { client in
            let applied = try await runner.run(on: client, logger: testLogger)
            #expect(applied == runner.migrations.map(\.version))
            #expect(try await runner.run(on: client, logger: testLogger).isEmpty)
            #expect(try await count(client, "SELECT count(*)::int FROM schema_migrations") == runner.migrations.count)
        }
    }

    @Test func concurrentRunsApplyEachFileOnce() async throws {
        let runner = try MigrationRunner.bundled()
        let database = try await TestPostgres.shared.makeEmptyDatabase()
        let results = try await withThrowingTaskGroup(of: [String].self) { group in
            for _ in 0..<6 {
                group.addTask { try await database.withClient { try await runner.run(on: $0, logger: testLogger) } }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        // Runs may share the files (each takes the lock file by file), never apply one twice,
        // and each applies its share in order.
        #expect(results.flatMap { $0 }.sorted() == runner.migrations.map(\.version))
        #expect(results.allSatisfy { $0 == $0.sorted() })
    }

    @Test func anEditedAppliedFileIsRefused() async throws {
        try await TestPostgres.shared.makeEmptyDatabase().withClient { client in
            let original = MigrationRunner(migrations: [Migration(version: "001_a", sql: "CREATE TABLE a (id int)")])
            try await original.run(on: client, logger: testLogger)
            let edited = MigrationRunner(migrations: [Migration(version: "001_a", sql: "CREATE TABLE a (id bigint)")])
            await #expect(throws: MigrationError.self) { try await edited.run(on: client, logger: testLogger) }
        }
    }

    @Test func aFailingFileIsRolledBackWhole() async throws {
        try await TestPostgres.shared.makeEmptyDatabase().withClient { client in
            let runner = MigrationRunner(migrations: [
                Migration(version: "001_ok", sql: "CREATE TABLE ok (id int);"),
                Migration(version: "002_bad", sql: "CREATE TABLE half (id int);\nSELECT no_such_function();"),
            ])
            do {
                try await runner.run(on: client, logger: testLogger)
                Issue.record("expected the second migration to fail")
            } catch let error as MigrationError {
                #expect(error.description.contains("002_bad"))
                #expect(error.description.contains("no_such_function"))
            }
            #expect(try await count(client, "SELECT count(*)::int FROM schema_migrations") == 1)
            #expect(try await count(client, "SELECT count(*)::int FROM pg_tables WHERE tablename = 'half'") == 0)
        }
    }

    @Test func aDatabaseAheadOfThisBuildIsRefused() async throws {
        try await TestPostgres.shared.makeEmptyDatabase().withClient { client in
            try await MigrationRunner(migrations: [
                Migration(version: "001_a", sql: "SELECT 1"), Migration(version: "002_b", sql: "SELECT 1"),
            ])
            .run(on: client, logger: testLogger)
            await #expect(throws: MigrationError.self) {
                try await MigrationRunner(migrations: [Migration(version: "001_a", sql: "SELECT 1")]).run(on: client, logger: testLogger)
            }
        }
    }
}

@Suite("SQL script splitting")
struct SQLScriptTests {
    @Test func splitsOnTopLevelSemicolonsOnly() throws {
        let script = """
            -- a comment; with a semicolon
            CREATE TABLE t (v text DEFAULT 'a;b');
            /* block; comment */
            CREATE FUNCTION f() RETURNS int LANGUAGE plpgsql AS $$
            BEGIN RETURN 1; END
            $$;
            CREATE FUNCTION g() RETURNS text LANGUAGE sql AS $body$ SELECT 'x;y' $body$;
            SELECT "weird;name" FROM t WHERE v = $1
            """
        let statements = SQLScript.statements(script)
        try #require(statements.count == 4)
        #expect(statements[0].hasSuffix("DEFAULT 'a;b')"))
        #expect(statements[1].contains("BEGIN RETURN 1; END"))
        #expect(statements[2].contains("'x;y'"))
        #expect(statements[3].hasPrefix("SELECT \"weird;name\""))
    }

    @Test func ignoresEmptyAndCommentOnlyPieces() {
        #expect(SQLScript.statements(";;\n-- only a comment\n;").isEmpty)
    }
}

@Suite("Service account files")
struct ServiceAccountTests {
    @Test func readsAGoogleServiceAccountFile() throws {
        let file = try ServiceAccountFile.make(projectID: "wowa-prod")
        let account = try ServiceAccount(json: Data(contentsOf: URL(fileURLWithPath: file.path)))
        #expect(account.projectID == "wowa-prod")
        #expect(account.clientEmail == file.clientEmail)
        #expect(account.privateKeyID == file.privateKeyID)
        #expect(account.privateKeyPEM.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        #expect(!account.description.contains("PRIVATE KEY"))
    }

    /// A NUL (which PostgreSQL's text refuses) in any field, and a project id that is not one
    /// (it becomes part of FCM's URL), are refused naming the field.
    @Test func refusesANulCharacterAndAProjectIDThatIsNotOne() throws {
        let file = try ServiceAccountFile.make(projectID: "wowa-prod")
        func account(_ changes: [String: String]) throws -> ServiceAccount {
            let fields = [
                "type": "service_account", "project_id": "wowa-prod", "client_email": file.clientEmail,
                "private_key": file.privateKeyPEM, "private_key_id": file.privateKeyID,
            ].merging(changes) { $1 }
            return try ServiceAccount(json: JSONSerialization.data(withJSONObject: fields))
        }
        #expect(try account(["project_id": "example.com:wowa-prod-2"]).projectID == "example.com:wowa-prod-2")
        for field in ["project_id", "client_email", "private_key_id", "type"] {
            let error = #expect(throws: ServiceAccountError.holdsNUL(field)) { try account([field: "a\u{0}b@c"]) }
            #expect(error?.description == "service account file's '\(field)' contains a NUL character (\\u0000)")
        }
        #expect(throws: ServiceAccountError.holdsNUL("private_key")) { try account(["private_key": file.privateKeyPEM + "\u{0}"]) }
        for projectID in ["Wowa-Prod", "wowa/prod", "wowa prod", "wowa\nprod", String(repeating: "p", count: 101)] {
            #expect(throws: ServiceAccountError.invalidProjectID) { try account(["project_id": projectID]) }
        }
    }

    @Test func refusesBrokenFiles() {
        let notJSON = #expect(throws: ServiceAccountError.self) {
            try ServiceAccount(json: Data("{\n  \"type\": \"service_account\",\n}".utf8))
        }
        #expect(notJSON?.description == "service account file is not valid JSON: unexpected '}' at line 3, column 1")
        #expect(throws: ServiceAccountError.notAnObject) { try ServiceAccount(json: Data("[]".utf8)) }
        #expect(throws: ServiceAccountError.notAString("project_id")) { try ServiceAccount(json: Data(#"{"project_id":5}"#.utf8)) }
        #expect(throws: ServiceAccountError.wrongType("authorized_user")) {
            try ServiceAccount(json: Data(#"{"type":"authorized_user"}"#.utf8))
        }
        #expect(throws: ServiceAccountError.missingField("client_email")) {
            try ServiceAccount(json: Data(#"{"type":"service_account","project_id":"p","private_key":"k"}"#.utf8))
        }
        #expect(throws: ServiceAccountError.unreadablePrivateKey) {
            try ServiceAccount(
                json: Data(
                    #"{"project_id":"p","client_email":"a@b","private_key":"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"}"#
                        .utf8))
        }
    }
}
