import Foundation
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A misconfigured program says what is wrong in one line and exits non-zero, never a stack trace.
@Suite("Startup errors")
struct StartupErrorTests {
    @Test(arguments: [
        ("push-api", [String: String](), "push-api: DATABASE_URL is required"),
        ("push-api", ["DATABASE_URL": "postgres://u@127.0.0.1/db"], "push-api: no JWT key configured"),
        (
            "push-api", ["DATABASE_URL": "postgres://u@127.0.0.1/db", "JWT_SECRET": "too-short"],
            "push-api: JWT_SECRET is 9 bytes; HS256 needs at least 32"
        ),
        (
            "push-api", ["DATABASE_URL": "postgres://u@127.0.0.1/db", "JWT_PUBLIC_KEY_FILE": "/nonexistent.pem"],
            "push-api: JWT_PUBLIC_KEY_FILE: /nonexistent.pem cannot be read"
        ),
        (
            "push-api", ["DATABASE_URL": "mysql://x", "JWT_SECRET": String(repeating: "s", count: 32)],
            "push-api: DATABASE_URL: expected postgres://"
        ),
        ("push-worker", [:], "push-worker: DATABASE_URL is required"),
        (
            "push-worker", ["DATABASE_URL": "postgres://u@127.0.0.1/db", "WORKER_CONCURRENCY": "lots"],
            "push-worker: WORKER_CONCURRENCY: 'lots' is not an integer"
        ),
        (
            "push-worker", ["DATABASE_URL": "postgres://u@127.0.0.1/db", "FCM_BASE_URL": "fcm.googleapis.com"],
            "push-worker: FCM_BASE_URL: 'fcm.googleapis.com' is not an https URL"
        ),
        (
            "push-worker", ["DATABASE_URL": "postgres://u@127.0.0.1/db", "FCM_BASE_URL": "http://127.0.0.1:8443"],
            "push-worker: FCM_BASE_URL: 'http://127.0.0.1:8443' is not an https URL"
        ),
        (
            "push-worker", ["DATABASE_URL": "postgres://u@127.0.0.1/db", "PUSH_CA_FILE": "/nonexistent.pem"],
            "push-worker: PUSH_CA_FILE: /nonexistent.pem cannot be read"
        ),
        (
            "push-worker", ["DATABASE_URL": "postgres://u@127.0.0.1/db", "DELIVERY_RETENTION_DAYS": "0"],
            "push-worker: DELIVERY_RETENTION_DAYS: '0' is neither a whole number of days in 1...3650 nor off"
        ),
    ])
    func oneClearLine(product: String, environment: [String: String], message: String) async throws {
        // An empty JWT_SECRET counts as unset: a secret in the test runner's own environment must not leak in.
        let result = try await BuiltProduct(product).run(
            [], environment: environment.merging(["JWT_SECRET": environment["JWT_SECRET"] ?? ""]) { $1 })
        #expect(result.status != 0)
        #expect(result.stderr.hasPrefix(message), "\(result.stderr)")
        #expect(result.stderr.split(separator: "\n").count == 1, "\(result.stderr)")
    }

    /// Runs `product` (pushctl as `pushctl jobs`) against `url`, with every other setting valid.
    static func start(_ product: String, databaseURL url: String) async throws -> (result: BuiltProduct.Result, took: Duration) {
        let started = ContinuousClock.now
        let result = try await BuiltProduct(product).run(
            product == "pushctl" ? ["jobs"] : [], environment: ["DATABASE_URL": url, "JWT_SECRET": String(repeating: "s", count: 32)])
        return (result, ContinuousClock.now - started)
    }

    /// A refused connection is known at once, so it is said at once, the same by every program.
    @Test(arguments: ["pushctl", "push-api", "push-worker"])
    func nothingListeningIsSaidAtOnce(product: String) async throws {
        // Bound, read, closed: nothing listens on it.
        let port = try LocalCluster.freePort()
        let (result, took) = try await Self.start(product, databaseURL: "postgres://u@127.0.0.1:\(port)/db")
        #expect(result.status != 0)
        #expect(result.stderr == "\(product): cannot reach the database: connection refused at 127.0.0.1:\(port)\n")
        #expect(took < .seconds(4), "\(took)")
    }

    /// Not timed: how long a failed lookup takes is the resolver's business.
    @Test func aHostThatDoesNotResolveIsNamed() async throws {
        let (result, _) = try await Self.start("pushctl", databaseURL: "postgres://u@no-such-host.invalid/db")
        #expect(result.status != 0)
        #expect(result.stderr == "pushctl: cannot reach the database: cannot resolve no-such-host.invalid\n")
    }

    /// The server's refusal of the log-in is its own words, at once (a pool would retry it unseen until its deadline).
    @Test func aRoleTheServerDoesNotKnowIsSaidAtOnce() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        var url = try #require(URLComponents(string: database.url))
        (url.user, url.password) = ("no_such_role", nil)
        let (result, took) = try await Self.start("pushctl", databaseURL: try #require(url.string))
        #expect(
            result.stderr.hasPrefix("pushctl: cannot reach the database at \(url.host ?? ""):\(url.port ?? 5432): ")
                && result.stderr.hasSuffix("role \"no_such_role\" does not exist\n"), "\(result.stderr)")
        #expect(took < .seconds(4), "\(took)")
    }

    /// Something that accepts connections but never speaks PostgreSQL is waited for until the deadline.
    @Test func aListenerThatNeverAnswersIsWaitedForUntilTheDeadline() async throws {
        let listener = try SilentListener()
        defer { listener.close() }
        let (result, took) = try await Self.start("pushctl", databaseURL: "postgres://u@127.0.0.1:\(listener.port)/db?sslmode=disable")
        #expect(result.stderr == "pushctl: cannot reach the database at 127.0.0.1:\(listener.port): no connection within 5.0 seconds\n")
        #expect(took >= .seconds(5) && took < .seconds(8), "\(took)")
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

/// A loopback socket that listens (the kernel completes connections into its backlog) and
/// never accepts or answers.
struct SilentListener {
    let descriptor: Int32
    let port: Int

    init() throws {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let listening = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, length) == 0 && getsockname(descriptor, $0, &length) == 0 && listen(descriptor, 16) == 0
            }
        }
        guard descriptor >= 0, listening else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        self.descriptor = descriptor
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    func close() {
        _ = Glibc.close(descriptor)
    }
}
