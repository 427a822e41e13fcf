import ArgumentParser
import DeviceRegistry
import Foundation

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Apply the SQL migrations this build ships (sql/), each once.",
        discussion: """
            Safe to run from several hosts at once: runs hold an advisory lock. Refuses to run when an \
            already-applied file was edited.
            """)

    @OptionGroup var database: DatabaseOptions

    @Option(help: "Read migrations from this folder instead of the ones built in.")
    var directory: String?

    func run() async throws {
        try await reportingErrors {
            let runner = try directory.map { try MigrationRunner(directory: URL(fileURLWithPath: $0)) } ?? MigrationRunner.bundled()
            let applied = try await withDatabase(database) { client, logger in
                try await runner.run(on: client, logger: logger)
            }
            print(applied.isEmpty ? "up to date (\(runner.migrations.count) migrations)" : "applied: \(applied.joined(separator: ", "))")
        }
    }
}
