import TestSupport
import Testing

/// push-api as operators run it: the built binary in its own process, under `openFilesLimit`
/// (soft and hard, as `ulimit -n` sets them) when given.
struct PushAPIProcess: Sendable {
    let product: RunningProduct
    let port: Int

    static func start(database url: String, openFilesLimit: Int? = nil, environment: [String: String]) async throws -> PushAPIProcess {
        let port = try LocalCluster.freePort()
        let product = try BuiltProduct("push-api").start(
            environment: [
                "DATABASE_URL": url, "JWT_SECRET": TokenMint.secret, "API_HOST": "127.0.0.1", "API_PORT": "\(port)",
                "LOG_LEVEL": "info",
            ].merging(environment) { $1 },
            openFilesLimit: openFilesLimit)
        do {
            try await product.waitUntilHealthy(port: port)
        } catch {
            await product.terminate()
            throw error
        }
        return PushAPIProcess(product: product, port: port)
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
    func terminate() async -> Int32? { await product.terminate() }

    var log: String { product.log }
}

/// A test's own failure, said in a line.
struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
