import Foundation
import Testing
import TestSupport

/// A misconfigured program says what is wrong in one line and exits non-zero, never a stack trace.
@Suite("Startup errors")
struct StartupErrorTests {
    @Test(arguments: [
        ("push-api", [String: String](), "push-api: DATABASE_URL is required"),
        ("push-api", ["DATABASE_URL": "postgres://u@127.0.0.1/db"], "push-api: no JWT key configured"),
        ("push-api", ["DATABASE_URL": "postgres://u@127.0.0.1/db", "JWT_SECRET": "too-short"], "push-api: JWT_SECRET is 9 bytes; HS256 needs at least 32"),
        ("push-api", ["DATABASE_URL": "postgres://u@127.0.0.1/db", "JWT_PUBLIC_KEY_FILE": "/nonexistent.pem"], "push-api: JWT_PUBLIC_KEY_FILE: /nonexistent.pem cannot be read"),
        ("push-api", ["DATABASE_URL": "mysql://x", "JWT_SECRET": String(repeating: "s", count: 32)], "push-api: DATABASE_URL: expected postgres://"),
        ("push-worker", [:], "push-worker: DATABASE_URL is required"),
        ("push-worker", ["DATABASE_URL": "postgres://u@127.0.0.1/db", "WORKER_CONCURRENCY": "lots"], "push-worker: WORKER_CONCURRENCY: 'lots' is not an integer"),
        ("push-worker", ["DATABASE_URL": "postgres://u@127.0.0.1/db", "FCM_BASE_URL": "fcm.googleapis.com"], "push-worker: FCM_BASE_URL: 'fcm.googleapis.com' is not an https URL"),
        ("push-worker", ["DATABASE_URL": "postgres://u@127.0.0.1/db", "FCM_BASE_URL": "http://127.0.0.1:8443"], "push-worker: FCM_BASE_URL: 'http://127.0.0.1:8443' is not an https URL"),
        ("push-worker", ["DATABASE_URL": "postgres://u@127.0.0.1/db", "PUSH_CA_FILE": "/nonexistent.pem"], "push-worker: PUSH_CA_FILE: /nonexistent.pem cannot be read"),
        // Port 1 on loopback: nothing listens there.
        ("push-api", ["DATABASE_URL": "postgres://u@127.0.0.1:1/db", "JWT_SECRET": String(repeating: "s", count: 32)],
         "push-api: cannot reach the database at 127.0.0.1:1: no connection within 5.0 seconds"),
        ("push-worker", ["DATABASE_URL": "postgres://u@127.0.0.1:1/db"], "push-worker: cannot reach the database at 127.0.0.1:1"),
    ])
    func oneClearLine(product: String, environment: [String: String], message: String) async throws {
        // An empty JWT_SECRET counts as unset: a secret in the test runner's own environment must not leak in.
        let result = try await BuiltProduct(product).run([], environment: environment.merging(["JWT_SECRET": environment["JWT_SECRET"] ?? ""]) { $1 })
        #expect(result.status != 0)
        #expect(result.stderr.hasPrefix(message), "\(result.stderr)")
        #expect(result.stderr.split(separator: "\n").count == 1, "\(result.stderr)")
    }

    @Test func aPublicKeyFileThatIsNotAKeyIsOneClearLine() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("not-a-key-\(UUID().uuidString).pem").path
        try "-----BEGIN PUBLIC KEY-----\nbm90IGEga2V5\n-----END PUBLIC KEY-----\n".write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let result = try await BuiltProduct("push-api").run(
            [], environment: ["DATABASE_URL": "postgres://u@127.0.0.1/db", "JWT_SECRET": "", "JWT_PUBLIC_KEY_FILE": path])
        #expect(result.status != 0)
        #expect(result.stderr == "push-api: JWT_PUBLIC_KEY_FILE \(path) is not an RSA or EC P-256 public key in PEM form\n")
    }

    @Test(arguments: ["push-api", "push-worker"])
    func helpIsComplete(product: String) async throws {
        let result = try await BuiltProduct(product).run(["--help"])
        #expect(result.status == 0)
        #expect(result.stdout.contains("DATABASE_URL"))
        #expect(result.stdout.contains("LOG_LEVEL"))
    }
}
