import Foundation
import HummingbirdTesting
import TestSupport
import Testing

/// schemathesis (PyPI), installed into a throwaway venv, fuzzes a live push-api from the OpenAPI
/// document it serves: every operation, with inputs the document allows and inputs it forbids,
/// each with the credential of its security scheme. No answer may be a 5xx (issue 30), and every
/// answer must be one the document describes.
@Suite("push-api fuzzed from its OpenAPI document (schemathesis)")
struct SchemaFuzzTests {
    /// The version whose CLI, checks and reports this test is written against; a seed reproduces
    /// a run only with the same version.
    static let schemathesis = "schemathesis==4.32.5"
    static let venv = Task { await PythonVenv.install([schemathesis], name: "schemathesis") }

    /// Test cases per operation in the fuzzing phase (the coverage phase adds its boundary
    /// cases, the stateful phase chains operations): about 1,150 requests in 20 s.
    static let examplesPerOperation = 50
    static let seed = 30

    /// What every answer is checked for. Not run, and why:
    /// - `positive_data_acceptance`: a request the document allows may still be refused for what
    ///   the database holds (an app code nobody registered, a cursor this endpoint never gave).
    /// - `use_after_free`: neither DELETE removes anything. `DELETE /push/devices/{id}` deactivates
    ///   the device and `DELETE /admin/jobs/{id}` cancels the job; both stay readable, by design.
    /// - `unsupported_method`, `allow_header_conformance`: a method a path does not have answers
    ///   404 `NOT_FOUND` (Hummingbird's router has no 405); a 405 with `Allow` would be better.
    static let checks = [
        "not_a_server_error",  // no 5xx, whatever the input
        "status_code_conformance",  // every status is one the document lists for the operation
        "content_type_conformance",
        "response_headers_conformance",  // documented headers (Retry-After on a 429) are there and valid
        "response_schema_conformance",  // every body matches the document's schema for its status
        "negative_data_rejection",  // what the document forbids is refused with a 4xx
        "missing_required_header",
        "ignored_auth",  // no credential, or a wrong one: 401, never the data
        "ensure_resource_availability",  // a registered device or queued job can be read back
    ]

    static let adminToken = "an-admin-token-for-the-schema-fuzz"

    @Test(
        "schemathesis finds no 5xx and no answer the OpenAPI document does not describe",
        .disabled("pip cannot reach PyPI here, so schemathesis cannot be installed (pip's output is printed above)") {
            await SchemaFuzzTests.venv.value.pypiUnreachable
        },
        .timeLimit(.minutes(10))
    )
    func fuzzFromTheServedDocument() async throws {
        let installation = await Self.venv.value
        defer { installation.remove() }
        let command = try installation.executable("schemathesis")
        let fixture = try await APIFixture.make()
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("schema-fuzz-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        try Self.configuration.write(toFile: folder + "/schemathesis.toml", atomically: true, encoding: .utf8)
        let log = CapturedLog()

        let run = try await fixture.test(.live, adminToken: Self.adminToken, logger: log.logger(level: .warning)) { client in
            let port = try #require(client.port)
            return try await Subprocess.run(
                command,
                [
                    "--config-file", folder + "/schemathesis.toml",
                    "run", "http://127.0.0.1:\(port)/openapi.yaml",
                    "--checks", Self.checks.joined(separator: ","),
                    "--phases", "examples,coverage,fuzzing,stateful",
                    "--max-examples", String(Self.examplesPerOperation), "--seed", String(Self.seed),
                    "--workers", "1", "--generation-database", "none", "--request-timeout", "10",
                    // The credentials are this test's own; reproductions need them and the tokens in bodies.
                    "--output-sanitize", "false", "--no-color",
                    "--report", "json,ndjson",
                    "--report-json-path", folder + "/report.json", "--report-ndjson-path", folder + "/events.ndjson",
                ],
                environment: [
                    "PUSH_FUZZ_USER_TOKEN": fixture.token(),
                    "PUSH_FUZZ_ADMIN_TOKEN": Self.adminToken,
                    "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost",
                ], directory: folder, timeLimit: .seconds(240))
        }
        let report: FuzzReport
        do {
            report = try FuzzReport(
                summaryJSON: Data(contentsOf: URL(fileURLWithPath: folder + "/report.json")),
                events: String(contentsOfFile: folder + "/events.ndjson", encoding: .utf8))
        } catch {
            Issue.record("no readable report from schemathesis (\(error)); it exited \(run.status):\n\(run.output.suffix(12_000))")
            return
        }

        print(
            "schemathesis \(report.version), seed \(Self.seed), \(report.requests.count) requests in "
                + String(format: "%.1f s", report.runningTime) + "; per operation:\n"
                + report.requestsPerOperation.map { "  \($0.count)\t\($0.operation)" }.joined(separator: "\n"))

        // No 5xx, read from the requests themselves as well as from schemathesis's check.
        let serverErrors = report.requests.filter { ($0.status ?? 0) >= 500 }
        if !serverErrors.isEmpty {
            Issue.record("\(serverErrors.count) answers were 5xx:\n\(serverErrors.prefix(10).map(\.summary).joined(separator: "\n\n"))")
        }
        if !report.failedChecks.isEmpty {
            Issue.record(
                "\(report.failedChecks.count) checks failed:\n\(report.failedChecks.prefix(10).map(\.summary).joined(separator: "\n\n"))")
        }
        if !report.errors.isEmpty {
            Issue.record("schemathesis met errors:\n\(report.errors.joined(separator: "\n"))")
        }
        #expect(run.status == 0, "schemathesis exited \(run.status):\n\(run.output.suffix(12_000))")
        #expect(
            report.exitCode == 0 && report.complete && report.stopReason == "completed",
            "exit code \(report.exitCode), complete \(report.complete), stop reason \(report.stopReason)")

        // Every operation of the document was fuzzed, each with requests that got past its
        // credential check (a credential that did not work would make the run pass vacuously).
        #expect(report.operations.total >= Self.operations.count)
        #expect(
            report.operations.tested == report.operations.total && report.operations.errored == 0
                && report.operations.skipped == 0, "\(report.operations)")
        let fuzzed = Dictionary(uniqueKeysWithValues: report.requestsPerOperation.map { ($0.operation, $0.count) })
        for operation in Self.operations {
            #expect(fuzzed[operation, default: 0] > 0, "\(operation) was not fuzzed")
        }
        for operation in Self.operations where !Self.withoutCredentials.contains(operation) {
            let statuses = report.statuses(of: operation)
            #expect(statuses.contains { $0 != 401 && $0 != 403 }, "\(operation) only answered \(statuses.sorted())")
        }
        // And requests got through validation into the database.
        #expect(report.statuses(of: "POST /push/devices").contains(201))
        #expect(report.statuses(of: "POST /push/notifications").contains(202))

        let errors = log.lines.filter { $0.hasPrefix("error") || $0.hasPrefix("critical") }
        if !errors.isEmpty {
            Issue.record("push-api logged at error level during the fuzz:\n\(errors.prefix(10).joined(separator: "\n"))")
        }
    }

    /// The operations of the document, as schemathesis names them (it leaves out `GET /openapi.yaml`,
    /// the document it was given).
    static let operations = [
        "POST /push/devices", "GET /push/devices", "DELETE /push/devices/{id}", "POST /push/notifications",
        "GET /admin/jobs", "GET /admin/jobs/{id}", "DELETE /admin/jobs/{id}", "POST /admin/jobs/{id}/cancel",
        "GET /admin/deliveries", "GET /healthz", "GET /readyz", "GET /metrics",
    ]
    static let withoutCredentials: Set<String> = ["GET /healthz", "GET /readyz", "GET /metrics"]

    /// Each security scheme of the document gets its own credential (the user's JWT for
    /// `bearerAuth`, the admin token for `adminToken`), read from the environment. Most generated
    /// app codes are the registered app's, so notifications get past the app lookup into
    /// `push_enqueue` and its SQL checks.
    static let configuration = """
        [auth.openapi.bearerAuth]
        bearer = "${PUSH_FUZZ_USER_TOKEN}"

        [auth.openapi.adminToken]
        bearer = "${PUSH_FUZZ_ADMIN_TOKEN}"

        [dictionaries.registered-app-codes]
        values = ["wowa"]

        [parameters."body.appCode"]
        dictionary = "registered-app-codes"
        probability = 0.75

        """
}

/// What schemathesis reports: the run's summary (`--report json`) and, from its event log
/// (`--report ndjson`), every request it sent with the answer and every check that failed.
struct FuzzReport {
    struct Operations: Decodable, CustomStringConvertible {
        var total: Int
        var selected: Int
        var tested: Int
        var errored: Int
        var skipped: Int
        var description: String { "\(total) operations, \(selected) selected, \(tested) tested, \(errored) errored, \(skipped) skipped" }
    }

    struct Summary: Decodable {
        var schemathesis_version: String
        var running_time: Double
        var stop_reason: String
        var complete: Bool
        var exit_code: Int
        var operations: Operations
    }

    /// One request and its answer.
    struct Exchange {
        var operation: String
        var phase: String
        var method: String
        var uri: String
        var headers: [(name: String, value: String)]
        var body: Data?
        /// Nil when there was no answer (a timeout, a closed connection).
        var status: Int?
        var answer: String

        /// The request as a curl command line (bash), with the answer.
        var summary: String {
            var words = ["curl", "-sS", "-X", method]
            for (name, value) in headers { words += ["-H", Self.quoted(Data("\(name): \(value)".utf8))] }
            if let body { words += ["--data-binary", Self.quoted(body)] }
            words.append(Self.quoted(Data(uri.utf8)))
            return "\(operation) (\(phase)) answered \(status.map(String.init) ?? "nothing"): \(answer.prefix(500))\n  "
                + words.joined(separator: " ")
        }

        /// Bash's `$'…'`: every byte survives, control characters included.
        static func quoted(_ bytes: Data) -> String {
            var text = "$'"
            for byte in bytes {
                switch byte {
                case UInt8(ascii: "'"): text += "\\'"
                case UInt8(ascii: "\\"): text += "\\\\"
                case 0x20..<0x7F: text.append(Character(UnicodeScalar(byte)))
                default: text += String(format: "\\x%02x", byte)
                }
            }
            return text + "'"
        }
    }

    struct FailedCheck {
        var check: String
        var code: String
        var title: String
        var message: String
        var exchange: Exchange?
        var summary: String {
            "\(code) \(title) (\(check)): \(message)\n" + (exchange?.summary ?? "(no request recorded)")
        }
    }

    var version: String
    var runningTime: Double
    var stopReason: String
    var complete: Bool
    var exitCode: Int
    var operations: Operations
    var requests: [Exchange] = []
    var failedChecks: [FailedCheck] = []
    /// Errors schemathesis met (not check failures): a schema it could not load, a request that
    /// could not be sent.
    var errors: [String] = []

    struct Unreadable: Error, CustomStringConvertible {
        var description: String
    }

    init(summaryJSON: Data, events: String) throws {
        let summary = try JSONDecoder().decode(Summary.self, from: summaryJSON)
        version = summary.schemathesis_version
        runningTime = summary.running_time
        stopReason = summary.stop_reason
        complete = summary.complete
        exitCode = summary.exit_code
        operations = summary.operations
        for line in events.split(separator: "\n") {
            guard let event = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                let (kind, payload) = event.first, event.count == 1
            else { throw Unreadable(description: "an event that is not one named object: \(line.prefix(300))") }
            switch kind {
            case "ScenarioFinished":
                try readScenario(payload as? [String: Any] ?? [:])
            case "NonFatalError", "FatalError", "Interrupted":
                errors.append("\(kind): \(String(line.prefix(2000)))")
            default:
                continue
            }
        }
    }

    private mutating func readScenario(_ scenario: [String: Any]) throws {
        let phase = scenario["phase"] as? String ?? "?"
        let recorder = scenario["recorder"] as? [String: Any] ?? [:]
        let label = recorder["label"] as? String ?? "?"
        let cases = recorder["cases"] as? [String: [String: Any]] ?? [:]
        let interactions = recorder["interactions"] as? [String: [String: Any]] ?? [:]
        let checks = recorder["checks"] as? [String: [[String: Any]]] ?? [:]
        var exchanges: [String: Exchange] = [:]
        for (caseID, interaction) in interactions.sorted(by: { $0.key < $1.key }) {
            let value = cases[caseID]?["value"] as? [String: Any] ?? [:]
            // A stateful scenario chains operations; each case names its own.
            let operation = phase == "stateful" ? "\(value["method"] as? String ?? "?") \(value["path"] as? String ?? "?")" : label
            guard let request = interaction["request"] as? [String: Any] else {
                throw Unreadable(description: "an interaction without its request in \(label)")
            }
            let response = interaction["response"] as? [String: Any]
            let headers = (request["headers"] as? [String: [String]] ?? [:]).sorted { $0.key < $1.key }
                .filter { !Self.transportHeaders.contains($0.key.lowercased()) }
                .flatMap { name, values in values.map { (name: name, value: $0) } }
            let exchange = Exchange(
                operation: operation, phase: phase, method: request["method"] as? String ?? "?", uri: request["uri"] as? String ?? "?",
                headers: headers, body: Self.bytes(request["body"]), status: response?["status_code"] as? Int,
                answer: Self.bytes(response?["content"]).map { String(decoding: $0, as: UTF8.self) } ?? "")
            exchanges[caseID] = exchange
            requests.append(exchange)
        }
        for (caseID, results) in checks.sorted(by: { $0.key < $1.key }) {
            for result in results where result["status"] as? String != "success" {
                let failure = (result["failure_info"] as? [String: Any])?["failure"] as? [String: Any] ?? [:]
                failedChecks.append(
                    FailedCheck(
                        check: result["name"] as? String ?? "?", code: failure["code"] as? String ?? "?",
                        title: failure["title"] as? String ?? "?", message: failure["message"] as? String ?? "\(result)",
                        exchange: exchanges[caseID]))
            }
        }
    }

    /// Headers any HTTP client adds, left out of the curl reproductions.
    static let transportHeaders: Set<String> = [
        "user-agent", "accept", "accept-encoding", "connection", "content-length",
        "x-schemathesis-testcaseid",
    ]

    /// A body as the event log holds it: `{"$base64": "…"}`.
    static func bytes(_ value: Any?) -> Data? {
        guard let encoded = (value as? [String: Any])?["$base64"] as? String else { return nil }
        return Data(base64Encoded: encoded)
    }

    /// Requests per operation, in the order of the document's paths as schemathesis ran them.
    var requestsPerOperation: [(operation: String, count: Int)] {
        var counts: [String: Int] = [:]
        var order: [String] = []
        for request in requests {
            if counts[request.operation] == nil { order.append(request.operation) }
            counts[request.operation, default: 0] += 1
        }
        return order.map { ($0, counts[$0]!) }
    }

    func statuses(of operation: String) -> Set<Int> {
        Set(requests.filter { $0.operation == operation }.compactMap(\.status))
    }
}
