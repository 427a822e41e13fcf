import DeviceRegistry
import Foundation
import TestSupport
import Testing

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// The pieces of scripts/run's demo mode and the README tour: the emulator's generated demo
/// service account, and scripts/dev-token's tokens against a real push-api.
@Suite("Demo mode")
struct DemoRunTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    @Test(.timeLimit(.minutes(2)))
    func emulatorGeneratesTheDemoServiceAccountOnceAndPushctlAcceptsIt() async throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("demo-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let file = folder.appendingPathComponent("demo-service-account.json").path
        let arguments = ["--port", "0", "--ca-out", folder.appendingPathComponent("ca.pem").path, "--demo-service-account", file]

        let first = try await Self.startEmulator(arguments)
        let generated = try Data(contentsOf: URL(fileURLWithPath: file))
        let mode = try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        // What pushctl app add --service-account reads.
        let account = try ServiceAccount(json: generated)
        #expect(account.projectID == "demo-project")
        #expect(account.clientEmail == "push-demo@demo-project.iam.gserviceaccount.com")
        #expect(account.privateKeyID != nil)
        #expect(first.log.contains("generated demo service account"))
        first.signal(SIGTERM)
        #expect(await first.exitStatus(within: .seconds(10)) == 0)

        // A restart trusts the same key: the app configured with it keeps sending.
        let second = try await Self.startEmulator(arguments)
        #expect(try Data(contentsOf: URL(fileURLWithPath: file)) == generated)
        #expect(!second.log.contains("generated demo service account"))
        second.signal(SIGTERM)
        #expect(await second.exitStatus(within: .seconds(10)) == 0)
    }

    @Test func emulatorStartupErrorsAreOneLine() async throws {
        let result = try await BuiltProduct("fcm-emulator").run(["--port", "0", "--ca-out", "/nonexistent/ca.pem"])
        #expect(result.status == 1)
        #expect(result.stderr == "fcm-emulator: --ca-out /nonexistent/ca.pem: cannot write to the folder /nonexistent\n")
        let missing = try await BuiltProduct("fcm-emulator").run(["--port", "0", "--service-account", "/nonexistent.json"])
        #expect(missing.status == 1)
        #expect(missing.stderr.hasPrefix("fcm-emulator: cannot read service account /nonexistent.json"))
        #expect(missing.stderr.split(separator: "\n").count == 1, "\(missing.stderr)")
    }

    @Test(.timeLimit(.minutes(2)))
    func devTokenIsAcceptedByPushAPI() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let added = try await BuiltProduct("pushctl").run(
            ["app", "add", "--code", "demo", "--name", "Demo"],
            environment: ["DATABASE_URL": database.url])
        #expect(added.status == 0, "\(added.stderr)")
        let appID = try #require(added.stdout.firstMatch(of: /\(id (\d+)\)/).map { String($0.1) })

        let secret = "dev-token-test-secret-" + UUID().uuidString
        let token = try Self.devToken(["42", appID], secret: secret)
        #expect(token.status == 0, "\(token.stderr)")
        let parts = token.stdout.trimmingCharacters(in: .newlines).split(separator: ".")
        #expect(parts.count == 3 && token.stdout.hasSuffix("\n") && token.stdout.filter { $0 == "\n" }.count == 1)
        let header = try #require(Self.base64URLDecoded(parts.first.map(String.init) ?? ""))
        #expect(String(decoding: header, as: UTF8.self) == #"{"alg":"HS256","typ":"JWT"}"#)
        let claims = try #require(
            try JSONSerialization.jsonObject(with: Self.base64URLDecoded(String(parts[1])) ?? Data()) as? [String: Any])
        #expect(claims["userId"] as? Int == 42)
        #expect(claims["appId"] as? Int == Int(appID))
        let exp = try #require(claims["exp"] as? Double)
        #expect(abs(exp - Date().timeIntervalSince1970 - 24 * 3600) < 60)

        let port = try LocalCluster.freePort()
        let api = try BuiltProduct("push-api").start(
            [], environment: ["DATABASE_URL": database.url, "JWT_SECRET": secret, "API_PORT": "\(port)", "PUSH_ADMIN_TOKEN": ""])
        defer { api.signal(SIGTERM) }
        let base = URL(string: "http://127.0.0.1:\(port)")!
        var up = false
        for _ in 0..<100 where !up {
            up = (try? await Self.request(base.appendingPathComponent("healthz")))?.status == 200
            if !up { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(up, "push-api did not start: \(api.log)")

        let body = Data(#"{"token":"dev-token-test-device","platform":"android"}"#.utf8)
        let registered = try await Self.request(
            base.appendingPathComponent("push/devices"), method: "POST", body: body,
            bearer: token.stdout.trimmingCharacters(in: .newlines))
        #expect(registered.status == 201, "\(registered.body)")
        #expect(registered.body.contains(#""token":"dev-token-test-device""#))
        // Its log line carries the logger's metadata (request id, user, app) and its own, and only
        // the first half of the 21-character token.
        let line = try #require(api.log.split(separator: "\n").first { $0.contains("device registered") }, "\(api.log)")
        #expect(line.contains(" info push-api: "), "\(line)")
        #expect(line.contains("hb.request.id=") && line.contains("push.user_id=42") && line.contains("push.app_id=\(appID)"), "\(line)")
        #expect(line.contains("push.token=dev-token-…") && !line.contains("dev-token-t"), "\(line)")
        #expect(line.hasSuffix("[PushAPI] device registered"), "\(line)")

        // Signed with another secret: refused.
        let forged = try Self.devToken(["42", appID], secret: secret + "-other")
        let refused = try await Self.request(
            base.appendingPathComponent("push/devices"), method: "POST", body: body,
            bearer: forged.stdout.trimmingCharacters(in: .newlines))
        #expect(refused.status == 401)

        // A token whose header carries a forged log line and terminal escapes (refused before any
        // key is tried): its text reaches the log escaped, on the refusal's own line.
        let hostileHeader = #"{"alg":"HS256\n2026-01-01T00:00:00+0000 error push-api: forged=1 \u001b[31mred","typ":"JWT"}"#
        let hostile =
            Data(hostileHeader.utf8).base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "") + ".e30.c2ln"
        let injected = try await Self.request(base.appendingPathComponent("push/devices"), method: "POST", body: body, bearer: hostile)
        #expect(injected.status == 401)
        try await Task.sleep(for: .milliseconds(200))
        let lines = api.log.split(separator: "\n")
        #expect(!lines.contains { $0.hasPrefix("2026-01-01T00:00:00+0000") || $0.contains("\u{1B}") }, "\(api.log)")
        let refusal = try #require(lines.first { $0.contains("access token refused") && $0.contains("forged") }, "\(api.log)")
        // One quoted value, its newline and escape written out: no second line, no extra field.
        #expect(
            refusal.contains(
                #"push.reason="the access token's algorithm HS256\n2026-01-01T00:00:00+0000 error push-api: forged=1 \u{1b}[31mred is not accepted""#
            ),
            "\(refusal)")
    }

    @Test(arguments: [["42"], ["0", "1"], ["42", "x"], ["42", "1", "0"], ["42", "1", "2", "3"]])
    func devTokenRefusesBadArguments(_ arguments: [String]) throws {
        let result = try Self.devToken(arguments, secret: "a-secret-of-at-least-thirty-two-bytes")
        #expect(result.status == 2)
        #expect(result.stdout.isEmpty)
        #expect(result.stderr.hasPrefix("dev-token: "))
    }

    // MARK: helpers

    private static func startEmulator(_ arguments: [String]) async throws -> RunningProduct {
        let emulator = try BuiltProduct("fcm-emulator").start(arguments, environment: [:])
        for _ in 0..<200 {
            if emulator.log.contains("FCM_BASE_URL=") { return emulator }
            if await emulator.exitStatus(within: .milliseconds(50)) != nil { break }
        }
        emulator.signal(SIGKILL)
        throw DemoTestError("fcm-emulator did not start: \(emulator.log)")
    }

    private static func devToken(_ arguments: [String], secret: String) throws -> (status: Int32, stdout: String, stderr: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        process.arguments = [repository.appendingPathComponent("scripts/dev-token").path] + arguments
        var environment = ProcessInfo.processInfo.environment
        environment["JWT_SECRET"] = secret
        process.environment = environment
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        try process.run()
        let stdout = out.fileHandleForReading.readDataToEndOfFile()
        let stderr = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: stdout, as: UTF8.self), String(decoding: stderr, as: UTF8.self))
    }

    private static func base64URLDecoded(_ text: String) -> Data? {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        return Data(base64Encoded: base64)
    }

    private static func request(_ url: URL, method: String = "GET", body: Data? = nil, bearer: String? = nil) async throws
        -> (status: Int, body: String)
    {
        var request = URLRequest(url: url, timeoutInterval: 10)
        request.httpMethod = method
        request.httpBody = body
        if body != nil { request.setValue("application/json", forHTTPHeaderField: "Content-Type") }
        if let bearer { request.setValue("Bearer \(bearer)", forHTTPHeaderField: "Authorization") }
        let (data, response) = try await URLSession.shared.data(for: request)
        return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
    }
}

struct DemoTestError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
