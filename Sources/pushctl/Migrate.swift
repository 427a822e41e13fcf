import ArgumentParser
import DeviceRegistry
import Foundation

struct Migrate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Apply the SQL migrations this build ships (sql/), each once.",
        discussion: """
            Safe to run from several hosts at once: runs hold an advisory lock. Refuses to run when an \
            already-applied file was edited. Then creates the delivery log's partitions for today and the next \
            7 days that are missing.
            """)

    @OptionGroup var database: DatabaseOptions

    @Option(help: "Read migrations from this folder instead of the ones built in.")
    var directory: String?

    func run() async throws {
        try await reportingErrors {
            let runner = try directory.map { try MigrationRunner(directory: URL(fileURLWithPath: $0)) } ?? MigrationRunner.bundled()
            let (applied, partitions): ([String], Result<[String], any Error>) = try await withDatabase(database) { client, logger in
                let applied: [String]
                do {
                    applied = try await runner.run(on: client, logger: logger)
                } catch  where DatabaseErrorText.sqlState(error) == .insufficientPrivilege {
                    throw CLIError(
                        "\(DatabaseErrorText.describe(error)): migrations create tables and functions, so the role needs CREATE on the schema (PostgreSQL 15 no longer grants it to every role: GRANT CREATE ON SCHEMA public TO the role) and to own what earlier migrations created"
                    )
                }
                // The delivery log's week ahead, as push-worker creates it hourly, so that a fresh
                // install or one whose workers were down for days writes into day partitions.
                // Not worth failing a deploy over: a backup's lock on the table times it out, and
                // push-worker creates them at start.
                let partitions: Result<[String], any Error>
                do {
                    partitions = .success(try await DeliveryPartitions(client: client, logger: logger).createAhead())
                } catch {
                    partitions = .failure(error)
                }
                return (applied, partitions)
            }
            print(applied.isEmpty ? "up to date (\(runner.migrations.count) migrations)" : "applied: \(applied.joined(separator: ", "))")
            switch partitions {
            case .success(let created) where !created.isEmpty:
                print("delivery log partitions created: \(created.joined(separator: ", "))")
            case .success: break
            case .failure(let error):
                FileHandle.standardError.write(
                    Data(
                        "pushctl: the delivery log's partitions ahead were not created (\(DatabaseErrorText.describe(error))); push-worker creates them at start and hourly\n"
                            .utf8))
            }
        }
    }
}
