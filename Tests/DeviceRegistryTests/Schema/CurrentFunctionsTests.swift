import DeviceRegistry
import Foundation
import PostgresNIO
import TestSupport
import Testing

/// Migrations redefine functions (push_enqueue_job is in 003, 004 and 012): docs/schema/functions.sql
/// holds the current text of each, as PostgreSQL prints it after every migration, and this test
/// keeps it true.
@Suite("The current SQL functions, in one file")
struct CurrentFunctionsTests {
    static let file = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
        .appendingPathComponent("docs/schema/functions.sql")

    static let header = """
        -- The current definition of every SQL function, as PostgreSQL prints it once every
        -- migration in sql/ has run. Generated, not applied: migrations are the source, and
        -- CurrentFunctionsTests fails when this file and a migrated database differ (it then
        -- writes the database's text next to the build, with the command that copies it here).

        """

    @Test func docsSchemaFunctionsIsWhatTheMigrationsDefine() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let current = try await database.withClient { client in
            var definitions: [String] = []
            for try await definition in try await client.query(
                """
                SELECT pg_get_functiondef(p.oid) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                 WHERE n.nspname = 'public' AND p.prokind = 'f'
                 ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)
                """
            ).decode(String.self) {
                definitions.append(definition.trimmingCharacters(in: .whitespacesAndNewlines) + ";\n")
            }
            return Self.header + definitions.joined(separator: "\n")
        }
        let written = try? String(contentsOf: Self.file, encoding: .utf8)
        if written != current {
            let fresh = FileManager.default.temporaryDirectory.appendingPathComponent("functions.sql")
            try current.write(to: fresh, atomically: true, encoding: .utf8)
            Issue.record("docs/schema/functions.sql is not what the migrations define: cp \(fresh.path) \(Self.file.path)")
        }
        #expect(current.contains("CREATE OR REPLACE FUNCTION public.push_enqueue_job("))
    }
}
