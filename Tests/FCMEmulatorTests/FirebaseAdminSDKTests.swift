import FCMEmulator
import Foundation
import Testing

/// firebase-admin (PyPI), installed into a throwaway venv, against the emulator with only the
/// token URI, the FCM URL and the CA pointed at it: what a backend team's own tests do.
@Suite("firebase-admin (Python) against the emulator")
struct FirebaseAdminSDKTests {
    static let checkScript = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("firebase_admin_check.py").path

    /// Each case of firebase_admin_check.py and what the SDK made of the emulator's answer: the
    /// SDK's own exception class, or the kind of message name it returned.
    static let expected: [String: String] = [
        "send": "OK sent",
        "send.dry_run": "OK dry run",
        "send.dry_run.unregistered": "RAISED UnregisteredError",
        "send.unregistered": "RAISED UnregisteredError",
        "send.invalid_token": "RAISED InvalidArgumentError",
        "send.sender_id_mismatch": "RAISED SenderIdMismatchError",
        "send.third_party_auth_error": "RAISED ThirdPartyAuthError",
        "send.quota_exceeded": "RAISED QuotaExceededError",
        // The project quota as FCM answers it: no FcmError, so the SDK's generic class for a 429.
        "send.rate_limit_exceeded": "RAISED ResourceExhaustedError",
        "send.unavailable": "RAISED UnavailableError",
        "send.internal": "RAISED InternalError",
        // Sent again by the SDK itself: after the Retry-After, after a new access token.
        "send.unavailable_once": "OK sent",
        "send.unauthenticated_once": "OK sent",
        "send.invalid_payload": "RAISED InvalidArgumentError",
        "send.other_project": "RAISED PermissionDeniedError",
        "send_each[0]": "OK sent",
        "send_each[1]": "RAISED UnregisteredError",
        "send_each[2]": "RAISED InvalidArgumentError",
        "send_each[3]": "RAISED SenderIdMismatchError",
        "send_each.dry_run[0]": "OK dry run",
        "send_each.dry_run[1]": "RAISED UnregisteredError",
        "send_each_for_multicast[0]": "OK sent",
        "send_each_for_multicast[1]": "OK sent",
        "send_each_for_multicast[2]": "RAISED UnregisteredError",
        "send_each_async[0]": "OK sent",
        "send_each_async[1]": "RAISED UnregisteredError",
    ]

    @Test(
        "send, dry run, send_each, multicast and async sends work, and each scripted failure raises the SDK's own class",
        .disabled("pip cannot reach PyPI here, so firebase-admin cannot be installed (pip's output is printed above)") {
            await FirebaseAdminVenv.installation.value.pypiUnreachable
        },
        .timeLimit(.minutes(10))
    )
    func sdkAgainstEmulator() async throws {
        let installation = await FirebaseAdminVenv.installation.value
        defer { try? FileManager.default.removeItem(atPath: installation.folder) }
        let venv = try installation.python.get()
        let fixture = try Fixtures.primary()
        let configuration = FCMEmulator.Configuration(serviceAccounts: [fixture.serviceAccount], prefixRules: PrefixRule.standard)
        try await FCMEmulator.withRunning(configuration) { emulator in
            let caFile = try #require(emulator.caFilePath)
            let folder = try TemporaryFolder()
            defer { folder.remove() }
            let serviceAccountFile = folder.path + "/service-account.json"
            try fixture.json(tokenURI: emulator.tokenURL).write(toFile: serviceAccountFile, atomically: true, encoding: .utf8)

            let run = try await Subprocess.run(
                venv, [Self.checkScript, "--service-account", serviceAccountFile, "--fcm-url", emulator.baseURL],
                environment: ["REQUESTS_CA_BUNDLE": caFile, "SSL_CERT_FILE": caFile, "NO_PROXY": "127.0.0.1,localhost"],
                timeLimit: .seconds(300)
            )
            #expect(run.status == 0, "firebase_admin_check.py failed:\n\(run.output)")
            let lines = run.output.split(separator: "\n").map(String.init)
            #expect(lines.contains("DONE"), "\(run.output)")

            var cases: [String: String] = [:]
            for line in lines where line.hasPrefix("CASE ") {
                let parts = line.split(separator: " ", maxSplits: 3).map(String.init)
                guard parts.count == 4 else { Issue.record("unreadable line: \(line)"); continue }
                #expect(cases[parts[1]] == nil, "case \(parts[1]) printed twice")
                cases[parts[1]] = parts[2] == "OK" ? "OK " + Self.kind(ofMessageName: parts[3]) : parts[2] + " " + parts[3]
            }
            for (name, outcome) in Self.expected.sorted(by: { $0.key < $1.key }) {
                #expect(cases[name] == outcome, "\(name)")
            }
            #expect(Set(cases.keys) == Set(Self.expected.keys), "cases printed and expected differ")

            // The emulator saw what the SDK says it did.
            let sent = try #require(emulator.lastAcceptedMessage(for: "sdk-device-1"))
            #expect(sent.requestBody.contains("from the SDK"))
            #expect(emulator.stats(for: "sdk-device-2") == DeviceStats(validateOnly: 1))
            #expect(emulator.stats(for: "sdk-unauthenticated") == DeviceStats(accepted: 1, rejected: 1))
            #expect(emulator.stats(for: "unavailable-sdk-7") == DeviceStats(accepted: 1, rejected: 1))
            #expect(emulator.stats(for: "sdk-unavailable").rejected > 1, "the SDK's transport retries a 503 before it raises")
            #expect(emulator.stats(for: "sdk-device-9") == DeviceStats(), "nothing of another project's send was delivered")
            #expect(emulator.stats.tokenExchanges >= 2, "the 401 made google-auth fetch a new access token")
            #expect(emulator.stats.rejectedTokenExchanges == 0)
        }
    }

    /// `OK sent` for a delivered message's name, `OK dry run` for a dry run's placeholder.
    static func kind(ofMessageName name: String) -> String {
        let prefix = "projects/\(Fixtures.projectID)/messages/"
        guard name.hasPrefix(prefix) else { return "unexpected name \(name)" }
        let id = name.dropFirst(prefix.count)
        if id == "fake_message_id" { return "dry run" }
        return id.hasPrefix("0:") ? "sent" : "unexpected name \(name)"
    }
}

/// A venv with firebase-admin installed from PyPI, made once for the suite in a temporary folder.
enum FirebaseAdminVenv {
    struct Installation: Sendable {
        /// The venv's folder, removed by the test that uses it.
        var folder: String
        /// The venv's python, or why there is none.
        var python: Result<String, InstallationFailure>
        var pypiUnreachable: Bool {
            if case .failure(let failure) = python { failure.pypiUnreachable } else { false }
        }
    }

    struct InstallationFailure: Error, CustomStringConvertible {
        var step: String
        var output: String
        var pypiUnreachable: Bool
        var description: String { "\(step) failed:\n\(output)" }
    }

    static let installation = Task<Installation, Never> {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("firebase-admin-venv-\(UUID().uuidString)").path
        do {
            let venv = try await Subprocess.run("/usr/bin/env", ["python3", "-m", "venv", folder], timeLimit: .seconds(120))
            guard venv.status == 0 else {
                try? FileManager.default.removeItem(atPath: folder)
                return Installation(folder: folder, python: .failure(InstallationFailure(
                    step: "python3 -m venv (scripts/test installs python3-venv)", output: venv.output, pypiUnreachable: false)))
            }
            let pip = try await Subprocess.run(
                folder + "/bin/pip", ["install", "--quiet", "--retries", "2", "--timeout", "30", "firebase-admin"], timeLimit: .seconds(600))
            guard pip.status == 0 else {
                let unreachable = pypiUnreachableMarkers.contains { pip.output.contains($0) }
                print("pip install firebase-admin failed:\n\(pip.output)")
                try? FileManager.default.removeItem(atPath: folder)
                return Installation(folder: folder, python: .failure(InstallationFailure(
                    step: "pip install firebase-admin", output: pip.output, pypiUnreachable: unreachable)))
            }
            return Installation(folder: folder, python: .success(folder + "/bin/python"))
        } catch {
            return Installation(folder: folder, python: .failure(InstallationFailure(step: "starting python3", output: "\(error)", pypiUnreachable: false)))
        }
    }

    /// What pip prints when it cannot reach the index, as opposed to any other failure.
    static let pypiUnreachableMarkers = [
        "Failed to establish a new connection", "Temporary failure in name resolution", "Name or service not known",
        "Network is unreachable", "Connection refused", "ConnectTimeoutError", "Read timed out", "ProxyError",
        "(from versions: none)",
    ]
}

/// A child process run to its end, stdout and stderr together in a file (never a pipe nobody reads).
enum Subprocess {
    struct Run: Sendable {
        var status: Int32
        var output: String
    }

    struct TimedOut: Error, CustomStringConvertible {
        var command: String
        var output: String
        var description: String { "\(command) did not finish in time:\n\(output)" }
    }

    static func run(_ executable: String, _ arguments: [String], environment: [String: String] = [:],
                    timeLimit: Duration) async throws -> Run {
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("subprocess-\(UUID().uuidString).log")
        FileManager.default.createFile(atPath: log.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: log) }
        let handle = try FileHandle(forWritingTo: log)
        defer { try? handle.close() }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        process.standardOutput = handle
        process.standardError = handle
        let exited = AsyncStream<Int32> { continuation in
            process.terminationHandler = { continuation.yield($0.terminationStatus); continuation.finish() }
        }
        try process.run()
        let status = await withTaskGroup(of: Int32?.self) { group in
            group.addTask { await exited.first { _ in true } }
            group.addTask {
                try? await Task.sleep(for: timeLimit)
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
        let output = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
        guard let status else {
            process.terminate()
            throw TimedOut(command: ([executable] + arguments).joined(separator: " "), output: output)
        }
        return Run(status: status, output: output)
    }
}

/// A fresh folder under the temporary directory.
struct TemporaryFolder {
    let path: String

    init() throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("fcm-emulator-test-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    func remove() {
        try? FileManager.default.removeItem(atPath: path)
    }
}
