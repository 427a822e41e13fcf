import Foundation
import HummingbirdTesting
import TestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// push-api as operators run it: the built binary in its own process, under `openFilesLimit`
/// (soft and hard, as `ulimit -n` sets them) when given.
struct PushAPIProcess: Sendable {
    let process: Process
    let port: Int
    let logPath: String

    static func start(database url: String, openFilesLimit: Int? = nil, environment: [String: String]) async throws -> PushAPIProcess {
        let port = try LocalCluster.freePort()
        let logPath = FileManager.default.temporaryDirectory.appendingPathComponent("push-api-\(UUID().uuidString).log").path
        try Data().write(to: URL(fileURLWithPath: logPath))
        let process = Process()
        let binary = BuiltProduct("push-api").path
        if let openFilesLimit {
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", "ulimit -n \(openFilesLimit) && exec \"$0\"", binary]
        } else {
            process.executableURL = URL(fileURLWithPath: binary)
        }
        var variables = ProcessInfo.processInfo.environment
        variables.merge([
            "DATABASE_URL": url, "JWT_SECRET": TokenMint.secret, "API_HOST": "127.0.0.1", "API_PORT": "\(port)",
            "LOG_LEVEL": "info",
        ]) { $1 }
        process.environment = variables.merging(environment) { $1 }
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        process.standardOutput = log
        process.standardError = log
        try process.run()
        let server = PushAPIProcess(process: process, port: port, logPath: logPath)
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            guard process.isRunning else { throw TestFailure("push-api exited: \(server.log)") }
            if (try? await TestClient.withClient(
                host: "127.0.0.1", port: port, configuration: .init(timeout: .seconds(2)),
                operation: {
                    try await $0.get("/healthz").status
                })) == .ok
            {
                return server
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        await server.terminate()
        throw TestFailure("push-api did not answer /healthz within 30 s: \(server.log)")
    }

    /// Runs `body`, then stops push-api whatever happened. Its log must hold no error or critical
    /// line but those `tolerated` allows.
    func whileRunning(tolerating tolerated: (Substring) -> Bool = { _ in false }, _ body: () async throws -> Void) async throws {
        do {
            try await body()
        } catch {
            await terminate()
            throw error
        }
        await terminate()
        let errors = log.split(separator: "\n").filter { ($0.contains(" error ") || $0.contains(" critical ")) && !tolerated($0) }
        #expect(errors.isEmpty, "\(log)")
    }

    /// SIGTERM, and SIGKILL if push-api has not exited 10 s later. Returns its exit status, nil
    /// when it had to be killed.
    @discardableResult
    func terminate() async -> Int32? {
        guard process.isRunning else { return process.terminationStatus }
        process.terminate()
        let deadline = ContinuousClock.now + .seconds(10)
        while process.isRunning && ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(50)) }
        guard process.isRunning else { return process.terminationStatus }
        kill(process.processIdentifier, SIGKILL)
        return nil
    }

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }
}

/// A test's own failure, said in a line.
struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
