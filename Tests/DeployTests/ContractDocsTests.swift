import DeviceRegistry
import Foundation
import Hummingbird
import Logging
import PostgresNIO
import Prometheus
import ServiceSupport
import TestSupport
import Testing
import Yams

@testable import FCMEmulator
@testable import PushAPI
@testable import PushDispatch

/// docs/contract.md is the external contract: each of its tables is compared, both ways, with
/// what the code has, so that a name it gives exists and a name the code has is given.
@Suite struct ContractDocsTests {
    static let document = "docs/contract.md"

    @Test func programsAreThePackagesExecutables() throws {
        let manifest = try String(contentsOf: repositoryRoot.appendingPathComponent("Package.swift"), encoding: .utf8)
        let executables = matches(of: #"\.executable\(name: "([^"]+)""#, in: manifest)
        try expectSameNames(
            documented: ContractDocument.load().keys(under: "Programs"), actual: Set(executables),
            section: "Programs", source: "Package.swift's executable products")
    }

    /// Pairs "VARIABLE read by program", so that a variable listed under the wrong program fails too.
    @Test func environmentVariablesAreWhatEachProgramReads() throws {
        let readBy: [String: Set<String>] = [
            "push-api": APIConfiguration.environmentVariables,
            "push-worker": DispatchConfiguration.environmentVariables,
            "pushctl": try variablesRead(bySourcesIn: ["Sources/pushctl"]),
            "fcm-emulator": try variablesRead(bySourcesIn: ["Sources/fcm-emulator", "Sources/FCMEmulator"]),
        ]
        #expect(readBy["pushctl"]?.contains("DATABASE_URL") == true, "the scan of Sources/pushctl finds nothing: its pattern is stale")
        let actual = Set(readBy.flatMap { program, variables in variables.map { "\($0) read by \(program)" } })
        let documented = try ContractDocument.load().rows(under: "Environment variables").flatMap { row in
            row.cells[1].split(separator: ",").map { "\(row.key) read by \($0.trimmingCharacters(in: .whitespaces))" }
        }
        expectSameNames(
            documented: documented, actual: actual, section: "Environment variables",
            source: "the programs' declared variables (APIConfiguration, DispatchConfiguration, Sources/pushctl)")
    }

    @Test func tablesAndTheirColumnsAreWhatTheMigrationsCreate() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let columns = try await database.withClient { client in
            var columns: [String: Set<String>] = [:]
            for try await (table, column) in try await client.query(
                """
                SELECT t.tablename::text, c.column_name::text FROM pg_tables t
                  JOIN information_schema.columns c ON c.table_schema = t.schemaname AND c.table_name = t.tablename
                 WHERE t.schemaname = 'public'
                   -- A partitioned table's partitions (the delivery log's days) are its own business.
                   AND NOT (SELECT relispartition FROM pg_class WHERE oid = format('%I.%I', t.schemaname, t.tablename)::regclass)
                """
            ).decode((String, String).self) {
                columns[table, default: []].insert(column)
            }
            return columns
        }
        let rows = try ContractDocument.load().rows(under: "Tables")
        expectSameNames(documented: rows.map(\.key), actual: Set(columns.keys), section: "Tables", source: "a migrated database")
        for row in rows {
            guard let existing = columns[row.key], row.cells.count > 2 else { continue }
            // Values in parentheses (`ios`, `logout`, …) are examples, not columns.
            for column in backticked(in: withoutParentheses(row.cells[2])) where !existing.contains(column) {
                Issue.record(
                    "\(Self.document) § Tables: `\(row.key)` names the column `\(column)`, which a migrated database's \(row.key) does not have"
                )
            }
        }
    }

    /// Names both ways, then each function's signature as PostgreSQL prints it.
    @Test func sqlFunctionsAreWhatTheMigrationsDefine() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let signatures = try await database.withClient { client in
            var signatures: [String: Set<String>] = [:]
            for try await (name, arguments, result) in try await client.query(
                """
                SELECT p.proname::text, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid)
                  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                 WHERE n.nspname = 'public' AND p.prokind = 'f'
                """
            ).decode((String, String, String).self) {
                signatures[name, default: []].insert(SQLSignature.normalised("\(name)(\(arguments)) RETURNS \(result)"))
            }
            return signatures
        }
        #expect(signatures.keys.contains("push_enqueue"), "the catalog query finds no push_enqueue: it is stale")
        let rows = try ContractDocument.load().rows(under: "SQL functions")
        let documented = rows.map { SQLSignature.name(of: $0.key) }
        expectSameNames(documented: documented, actual: Set(signatures.keys), section: "SQL functions", source: "a migrated database")
        for row in rows {
            let name = SQLSignature.name(of: row.key)
            guard let existing = signatures[name] else { continue }
            if !existing.contains(SQLSignature.normalised(row.key)) {
                Issue.record(
                    "\(Self.document) § SQL functions gives `\(row.key)`; a migrated database has `\(existing.sorted().joined(separator: "` and `"))`"
                )
            }
            let audience = row.cells.count > 1 ? row.cells[1] : ""
            if !["backends", "internal"].contains(audience) {
                Issue.record("\(Self.document) § SQL functions: `\(name)` is for '\(audience)', not backends or internal")
            }
        }
    }

    @Test func pushAPIEndpointsAreItsRoutesAndItsOpenAPIPaths() async throws {
        let logger = Logger(label: "contract-docs")
        let client = try unconnectedClient(logger: logger)
        let router = try buildRouter(
            client: client, audit: .primary(client), registry: DeviceDirectory(client: client),
            registrations: RegistrationBatcher(registry: DeviceDirectory(client: client), lanes: 1, deadline: .seconds(1), logger: logger),
            metrics: RequestMetrics(registry: PrometheusCollectorRegistry()),
            verifier: try await UserTokenVerifier(.init(hmacSecret: String(repeating: "k", count: 32))),
            adminToken: "contract-docs-admin-token", deadline: DatabaseDeadline(limit: .seconds(1)), logger: logger)
        let rows = try ContractDocument.load().rows(under: "push-api endpoints")
        // The console's pages have a table of their own, and no place in the API's schema.
        let routes = Set(router.routes.map { "\($0.method) \($0.path)" })
        let consolePages = routes.filter { $0.split(separator: " ").last?.hasPrefix("/console") == true }
        expectSameNames(
            documented: rows.map(\.key), actual: routes.subtracting(consolePages),
            section: "push-api endpoints", source: "push-api's router (Sources/PushAPI/Application+build.swift)")
        expectSameNames(
            documented: try ContractDocument.load().keys(under: "push-api console pages"), actual: consolePages,
            section: "push-api console pages", source: "the console's routes (Sources/PushAPI/Console/ConsoleController.swift)")

        // The schema the doc links to describes the same operations, with the auth the doc gives.
        let authentication = try OpenAPIAuthentication.load()
        expectSameNames(
            documented: rows.map(\.key), actual: Set(authentication.keys),
            section: "push-api endpoints", source: "the paths of Sources/PushAPI/openapi.yaml")
        for row in rows {
            if let declared = authentication[row.key], row.cells[1] != declared {
                Issue.record("\(Self.document) § push-api endpoints: `\(row.key)` takes '\(row.cells[1])', openapi.yaml says '\(declared)'")
            }
        }
    }

    @Test func pushWorkerEndpointsAreItsRoutes() throws {
        let logger = Logger(label: "contract-docs")
        let client = try unconnectedClient(logger: logger)
        let router = workerOperationsRouter(client: client, metrics: DispatchMetrics(), logger: logger)
        try expectSameNames(
            documented: ContractDocument.load().keys(under: "push-worker endpoints"),
            actual: Set(router.routes.map { "\($0.method) \($0.path)" }),
            section: "push-worker endpoints", source: "push-worker's router (Sources/PushDispatch/WorkerOperations.swift)")
    }

    @Test func fcmEmulatorEndpointsAreItsRoutes() throws {
        let logger = Logger(label: "contract-docs")
        let core = EmulatorCore(configuration: FCMEmulator.Configuration())
        let send = SendEndpoint(
            registry: core.registry, ledger: core.ledger, latency: core.latency, messageIDs: core.messageIDs,
            answers: try CannedAnswers.load(), logger: logger)
        let router = EmulatorRoutes.router(core: core, send: send, scheme: "https", logger: logger)
        try expectSameNames(
            documented: ContractDocument.load().keys(under: "fcm-emulator endpoints"),
            actual: Set(router.routes.map { "\($0.method) \($0.path)" }),
            section: "fcm-emulator endpoints", source: "fcm-emulator's router (Sources/FCMEmulator/FCMEmulator.swift)")
    }

    /// The command tree as ArgumentParser describes it (`--experimental-dump-help`), and every
    /// option a row names is one of that command's.
    @Test func pushctlCommandsAreItsCommandTree() async throws {
        let dump = try await BuiltProduct("pushctl").run(["--experimental-dump-help"])
        #expect(dump.status == 0, "pushctl --experimental-dump-help: \(dump.stderr)")
        let tree = try JSONDecoder().decode(CommandTree.self, from: Data(dump.stdout.utf8))
        let options = tree.command.optionsByCommand()
        #expect(options.count > 1, "pushctl --experimental-dump-help lists no subcommands")
        let rows = try ContractDocument.load().rows(under: "pushctl")
        expectSameNames(documented: rows.map(\.key), actual: Set(options.keys), section: "pushctl", source: "pushctl's command tree")
        for row in rows {
            guard let known = options[row.key] else { continue }
            for option in matches(of: #"(?<![\w-])--([a-z][a-z0-9-]*)"#, in: row.cells.dropFirst().joined(separator: " "))
            where !known.contains(option) {
                Issue.record("\(Self.document) § pushctl: `\(row.key)` names --\(option), which `\(row.key) --help` does not have")
            }
        }
    }
}

/// A client for building routers that are only listed: it is never run, so nothing connects.
private func unconnectedClient(logger: Logger) throws -> PostgresClient {
    PostgresClient(configuration: try DatabaseConfiguration.parse("postgres://nobody@127.0.0.1:1/none"), backgroundLogger: logger)
}

/// Records, one line each, what the document names and `source` lacks and what `source` has and
/// the document does not name.
private func expectSameNames(
    documented: [String], actual: Set<String>, section: String, source: String,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    #expect(!actual.isEmpty, "\(source) has nothing: the way the test reads it is stale", sourceLocation: sourceLocation)
    for name in Set(documented).subtracting(actual).sorted() {
        Issue.record(
            "\(ContractDocsTests.document) § \(section) names `\(name)`, which \(source) does not have", sourceLocation: sourceLocation)
    }
    for name in actual.subtracting(documented).sorted() {
        Issue.record(
            "\(ContractDocsTests.document) § \(section) does not name `\(name)`, which \(source) has", sourceLocation: sourceLocation)
    }
    for name in Set(documented) where documented.filter({ $0 == name }).count > 1 {
        Issue.record("\(ContractDocsTests.document) § \(section) names `\(name)` twice", sourceLocation: sourceLocation)
    }
}

/// The tables of docs/contract.md: under each heading, the rows whose first cell starts with a
/// backticked name; that name is the row's key.
struct ContractDocument {
    struct Row {
        let key: String
        let cells: [String]
    }

    let rowsByHeading: [String: [Row]]

    static func load() throws -> ContractDocument {
        try ContractDocument(String(contentsOf: repositoryRoot.appendingPathComponent(ContractDocsTests.document), encoding: .utf8))
    }

    init(_ text: String) {
        var rows: [String: [Row]] = [:]
        var heading = ""
        for line in outsideCodeBlocks(text) {
            if line.hasPrefix("#") {
                heading = headingTitle(line)
            } else if line.hasPrefix("| `") {
                let cells = Self.cells(of: line)
                if let key = backticked(in: cells[0]).first { rows[heading, default: []].append(Row(key: key, cells: cells)) }
            }
        }
        rowsByHeading = rows
    }

    /// A missing heading is a failure of its own, so that renaming one never empties a check.
    func rows(under heading: String) throws -> [Row] {
        guard let rows = rowsByHeading[heading], !rows.isEmpty else {
            throw ContractDocumentError(description: "\(ContractDocsTests.document) has no table under the heading '\(heading)'")
        }
        return rows
    }

    func keys(under heading: String) throws -> [String] { try rows(under: heading).map(\.key) }

    /// Cells between unescaped pipes, with `\|` unescaped.
    static func cells(of line: String) -> [String] {
        var cells: [String] = []
        var current = ""
        var escaped = false
        for character in line {
            if escaped {
                current.append(character)
                escaped = false
            } else if character == "\\" {
                escaped = true
            } else if character == "|" {
                cells.append(current.trimmingCharacters(in: .whitespaces))
                current = ""
            } else {
                current.append(character)
            }
        }
        return Array(cells.dropFirst())
    }
}

struct ContractDocumentError: Error, CustomStringConvertible {
    let description: String
}

/// A function's signature as the doc writes it: `name(arguments) RETURNS result`.
enum SQLSignature {
    static func name(of signature: String) -> String {
        String(signature.prefix { $0 != "(" })
    }

    /// PostgreSQL's wording with `timestamptz` for `timestamp with time zone` and no casts on defaults.
    static func normalised(_ signature: String) -> String {
        signature.replacingOccurrences(of: "timestamp with time zone", with: "timestamptz")
            .replacingOccurrences(of: #"::[a-z][a-z ]*(\[\])?(?=[,)]|$)"#, with: "", options: .regularExpression)
    }
}

/// Each operation of openapi.yaml and its auth in the doc's words.
enum OpenAPIAuthentication {
    static func load() throws -> [String: String] {
        let url = repositoryRoot.appendingPathComponent("Sources/PushAPI/openapi.yaml")
        let document = try Yams.load(yaml: String(contentsOf: url, encoding: .utf8)) as? [String: Any]
        let paths = document?["paths"] as? [String: [String: Any]] ?? [:]
        var result: [String: String] = [:]
        for (path, operations) in paths {
            for (method, operation) in operations where ["get", "put", "post", "delete", "patch", "head", "options"].contains(method) {
                // No `security` of its own: the document's default, the app user's JWT.
                let security = (operation as? [String: Any])?["security"] as? [[String: Any]]
                let auth =
                    switch security {
                    case nil: "app user"
                    case let requirements? where requirements.contains(where: { $0["adminToken"] != nil }): "admin token"
                    case let requirements? where requirements.isEmpty: "none"
                    default: "unknown (\(String(describing: security)))"
                    }
                result["\(method.uppercased()) \(path)"] = auth
            }
        }
        return result
    }
}

/// What `--experimental-dump-help` prints (ArgumentParser's ToolInfo), as far as it is read here.
struct CommandTree: Decodable {
    struct Command: Decodable {
        struct Argument: Decodable {
            struct Name: Decodable {
                let kind: String
                let name: String
            }
            let names: [Name]?
        }

        let commandName: String
        let subcommands: [Command]?
        let arguments: [Argument]?

        /// "pushctl app add" → its long options, for every command below the root. ArgumentParser's
        /// own `help` subcommand is left out: `--help` on every command stands for it.
        func optionsByCommand(prefix: String = "") -> [String: Set<String>] {
            let path = prefix.isEmpty ? commandName : "\(prefix) \(commandName)"
            var result: [String: Set<String>] =
                prefix.isEmpty ? [:] : [path: Set((arguments ?? []).flatMap { ($0.names ?? []).filter { $0.kind == "long" }.map(\.name) })]
            for subcommand in subcommands ?? [] where !(prefix.isEmpty && subcommand.commandName == "help") {
                result.merge(subcommand.optionsByCommand(prefix: path)) { $1 }
            }
            return result
        }
    }

    let command: Command
}

/// The variables a program's sources read: `environment["NAME"]` and `declared: ["NAME", …]`
/// (EnvironmentSettings), for the programs without a declared list of their own.
private func variablesRead(bySourcesIn folders: [String]) throws -> Set<String> {
    var variables: Set<String> = []
    for folder in folders {
        guard let files = FileManager.default.enumerator(at: repositoryRoot.appendingPathComponent(folder), includingPropertiesForKeys: nil)
        else {
            throw ContractDocumentError(description: "\(folder) cannot be read")
        }
        for case let file as URL in files where file.pathExtension == "swift" {
            let source = try String(contentsOf: file, encoding: .utf8)
            variables.formUnion(matches(of: #"environment\["([A-Z][A-Z0-9_]*)"\]"#, in: source))
            for list in matches(of: #"declared: \[([^\]]*)\]"#, in: source) {
                variables.formUnion(matches(of: #""([A-Z][A-Z0-9_]*)""#, in: list))
            }
        }
    }
    return variables
}

private func backticked(in text: String) -> [String] { matches(of: "`([^`]+)`", in: text) }

/// `text` without anything in parentheses, nested or not.
private func withoutParentheses(_ text: String) -> String {
    var depth = 0
    return String(
        text.filter { character in
            if character == "(" {
                depth += 1
            } else if character == ")" {
                depth -= 1
                return false
            }
            return depth == 0
        })
}
