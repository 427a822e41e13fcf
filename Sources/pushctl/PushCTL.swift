import ArgumentParser
import DeviceRegistry
import Foundation
import Logging
import ServiceSupport
import WireFormats

@main
struct PushCTL: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pushctl",
        abstract:
            "Operate the push service: migrations, apps, sending, campaigns, jobs, the delivery audit, devices, pruning, retention.",
        discussion: """
            Every command reads DATABASE_URL (or --database-url) and LOG_LEVEL (or --log-level, default info); \
            jobs, job, deliveries and devices read from DATABASE_READ_URL (or --database-read-url), a streaming \
            standby, when it is set.
            """,
        subcommands: [
            Migrate.self, AppCommand.self, Send.self, Campaign.self, Jobs.self, Job.self, Cancel.self, Deliveries.self,
            Devices.self, Prune.self, Retention.self,
        ])
}

/// Options every database command shares.
struct DatabaseOptions: ParsableArguments {
    @Option(name: .customLong("database-url"), help: "postgres://user:password@host:port/db (default: DATABASE_URL).")
    var databaseURL: String?

    @Option(help: "trace, debug, info, notice, warning, error or critical (LOG_LEVEL, default info).")
    var logLevel: String?

    func resolvedURL() throws -> String {
        if let databaseURL, !databaseURL.isEmpty { return databaseURL }
        if let value = ProcessInfo.processInfo.environment["DATABASE_URL"], !value.isEmpty { return value }
        throw CLIError("DATABASE_URL is not set (or pass --database-url)")
    }

    /// The option wins over LOG_LEVEL; a level that is neither is refused rather than ignored.
    func logger() throws(ConfigurationError) -> Logger {
        var environment = ProcessInfo.processInfo.environment
        if let logLevel { environment["LOG_LEVEL"] = logLevel }
        let level = try EnvironmentSettings(environment, declared: ["LOG_LEVEL"]).logLevel()
        return Logger(label: "pushctl") { StandardErrorLogHandler(label: $0, level: level ?? .info) }
    }
}

/// The audit commands' options: the database's, and a standby to read from instead.
struct AuditDatabaseOptions: ParsableArguments {
    @OptionGroup var database: DatabaseOptions

    @Option(
        name: .customLong("database-read-url"),
        help: "A streaming standby to read from, its lag shown on stderr (default: DATABASE_READ_URL; unset: the primary).")
    var databaseReadURL: String?

    func resolvedReadURL() -> String? {
        if let databaseReadURL, !databaseReadURL.isEmpty { return databaseReadURL }
        if let value = ProcessInfo.processInfo.environment["DATABASE_READ_URL"], !value.isEmpty { return value }
        return nil
    }
}

/// A failure worth one line on stderr and exit status 1.
struct CLIError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

extension TextColumnEnum {
    /// The case an option's text names; nil when the option was not given.
    static func parse(_ text: String?, option: String) throws -> Self? {
        guard let text else { return nil }
        guard let value = Self(rawValue: text) else { throw CLIError("\(option) must be one of \(choiceList)") }
        return value
    }
}

/// An option whose JSON (given, or in the file it names) does not parse, refused before anything
/// touches the database: named as the operator wrote it, with what is wrong and where.
struct InvalidJSONOption: Error, CustomStringConvertible {
    /// `--message`, or `--service-account key.json`.
    let option: String
    let syntax: JSONSyntaxError
    var description: String { "\(option) is not valid JSON: \(syntax)" }
}

extension AsyncParsableCommand {
    /// Runs `body`, turning every failure into one line on stderr and a non-zero exit.
    func reportingErrors(_ body: () async throws -> Void) async throws {
        do {
            try await body()
        } catch let error as ExitCode {
            throw error
        } catch {
            let text =
                if DatabaseErrorText.isOutage(error) {
                    "the database is unavailable: \(DatabaseErrorText.describe(error))"
                } else if DatabaseErrorText.isServerError(error) {
                    DatabaseErrorText.describe(error)
                } else {
                    "\(error)"
                }
            FileHandle.standardError.write(Data("pushctl: \(text)\n".utf8))
            throw ExitCode.failure
        }
    }
}
