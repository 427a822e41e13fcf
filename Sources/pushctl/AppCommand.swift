import ArgumentParser
import DeviceRegistry
import Foundation

struct AppCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "app",
        abstract: "Add apps, set their Firebase credentials and send rate, list them.",
        subcommands: [Add.self, SetCredentials.self, SetRate.self, List.self])

    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Add an app. Without --service-account it can register devices but not send.")

        @OptionGroup var database: DatabaseOptions
        @Option(help: "Short unique code, e.g. wowa (lowercase letters, digits, - and _).") var code: String
        @Option(help: "Display name.") var name: String
        @Option(help: "Google service-account JSON file of the app's Firebase project (- reads standard input).")
        var serviceAccount: String?

        func run() async throws {
            try await reportingErrors {
                let account = try serviceAccount.map(readServiceAccount)
                let app = try await withDatabase(database) { client, logger in
                    try await AppDirectory(client: client, logger: logger).add(code: code, name: name, serviceAccount: account)
                }
                print("app \(app.code) added (id \(app.id))\(account.map { ", \($0)" } ?? ", no credentials yet")")
            }
        }
    }

    struct SetCredentials: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set-credentials",
            abstract: "Set or rotate an app's Firebase credentials; the worker picks them up without a restart.")

        @OptionGroup var database: DatabaseOptions
        @Option(help: "The app's code.") var code: String
        @Option(help: "Google service-account JSON file (- reads standard input).") var serviceAccount: String

        func run() async throws {
            try await reportingErrors {
                let account = try readServiceAccount(serviceAccount)
                let app = try await withDatabase(database) { client, logger in
                    try await AppDirectory(client: client, logger: logger).setCredentials(code: code, serviceAccount: account)
                }
                print("app \(app.code): credentials set, \(account)")
            }
        }
    }

    struct SetRate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set-rate",
            abstract: "Cap an app's sends per second, across all workers (or lift the cap with --unlimited).",
            discussion: """
                The cap is the app's, shared by every running worker (not per worker); workers follow a \
                change without a restart, for what they claim from then on. It counts first sends: retries \
                come on top. New apps are unlimited.
                """)

        @OptionGroup var database: DatabaseOptions
        @Option(help: "The app's code.") var code: String
        // Unconditional: `--per-second -5` is refused as a rate, not as an unknown option.
        @Option(parsing: .unconditional, help: "At most this many sends per second (a positive whole number).") var perSecond: Int?
        @Flag(help: "No cap (the default for a new app).") var unlimited = false

        func validate() throws {
            switch (perSecond, unlimited) {
            case (nil, false): throw ValidationError("give --per-second N, or --unlimited")
            case (.some, true): throw ValidationError("give --per-second or --unlimited, not both")
            case (let rate?, false) where rate <= 0:
                throw ValidationError(
                    "--per-second must be a positive whole number of sends per second, not \(rate) (--unlimited lifts the cap)")
            default: break
            }
        }

        func run() async throws {
            try await reportingErrors {
                let app = try await withDatabase(database) { client, logger in
                    try await AppDirectory(client: client, logger: logger).setRate(code: code, perSecond: unlimited ? nil : perSecond)
                }
                print("app \(app.code): " + (app.maxSendsPerSecond.map { "at most \($0) sends per second" } ?? "no send rate cap"))
            }
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List apps (never shows private keys).")

        @OptionGroup var database: DatabaseOptions

        func run() async throws {
            try await reportingErrors {
                let apps = try await withDatabase(database) { client, logger in
                    try await AppDirectory(client: client, logger: logger).list()
                }
                let rows = apps.map { app in
                    [
                        String(app.id), app.code, app.name, app.fcmProjectID ?? "-", app.fcmClientEmail ?? "-",
                        app.hasCredentials ? "yes" : "no", app.maxSendsPerSecond.map(String.init) ?? "unlimited",
                    ]
                }
                print(
                    TextTable.render(header: ["ID", "CODE", "NAME", "FCM PROJECT", "CLIENT EMAIL", "CREDENTIALS", "SENDS/S"], rows: rows))
            }
        }
    }
}

/// `-` is standard input: the key need not be written to a file where pushctl runs (a
/// container's read-only filesystem, `kubectl exec -i … < key.json`).
func readServiceAccount(_ path: String) throws -> ServiceAccount {
    let read = path == "-" ? try? FileHandle.standardInput.readToEnd() : FileManager.default.contents(atPath: path)
    guard let data = read, !data.isEmpty else {
        throw CLIError(path == "-" ? "no service account on standard input" : "cannot read the service account file \(path)")
    }
    do {
        return try ServiceAccount(json: data)
    } catch .notJSON(let syntax) {
        throw InvalidJSONOption(option: "--service-account \(path)", syntax: syntax)
    } catch {
        throw CLIError("--service-account \(path): \(error.description)")
    }
}
