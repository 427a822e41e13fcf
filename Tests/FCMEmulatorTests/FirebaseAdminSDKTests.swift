import FCMEmulator
import Foundation
import TestSupport
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
        defer { installation.remove() }
        let venv = try installation.executable("python")
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
                guard parts.count == 4 else {
                    Issue.record("unreadable line: \(line)")
                    continue
                }
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
    static let installation = Task { await PythonVenv.install(["firebase-admin"], name: "firebase-admin") }
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
