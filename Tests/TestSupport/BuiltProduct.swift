import AsyncHTTPClient
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Runs one of the package's executables as a subprocess, the way operators and cron do.
public struct BuiltProduct: Sendable {
    public let path: String

    /// Finds `name` next to the test bundle (what `swift build --build-tests` produces).
    public init(_ name: String) {
        let beside = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent(name).path
        let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let candidates = [beside, repository.appendingPathComponent(".build/debug/\(name)").path]
        path = candidates.first { FileManager.default.isExecutableFile(atPath: $0) } ?? beside
    }

    /// This process's environment without DATABASE_URL (a test never touches a real database
    /// by accident), plus `overrides`.
    static func childEnvironment(_ overrides: [String: String]) -> [String: String] {
        var base = ProcessInfo.processInfo.environment
        base["DATABASE_URL"] = nil
        return base.merging(overrides) { $1 }
    }

    public struct Result: Sendable {
        public let status: Int32
        public let stdout: String
        public let stderr: String
    }

    /// Runs with the given arguments to completion, its standard input read from `inputFile`
    /// when given; its output is read once it has exited.
    public func run(_ arguments: [String], environment: [String: String] = [:], inputFile: String? = nil) async throws -> Result {
        let (out, err) = (try OutputFile("run-stdout"), try OutputFile("run-stderr"))
        defer {
            out.remove()
            err.remove()
        }
        let (_, exited) = try Process.started(
            path, arguments, environment: Self.childEnvironment(environment), output: out.handle, errors: err.handle,
            input: inputFile.flatMap(FileHandle.init(forReadingAtPath:)))
        var status: Int32 = -1
        for await code in exited { status = code }
        return Result(status: status, stdout: out.text, stderr: err.text)
    }
}

/// A long-running product started as a subprocess, for signal tests.
public final class RunningProduct: Sendable {
    let process: Process
    public let logPath: String

    init(process: Process, logPath: String) {
        self.process = process
        self.logPath = logPath
    }

    public var pid: Int32 { process.processIdentifier }

    public func signal(_ signal: Int32) { kill(process.processIdentifier, signal) }

    /// Waits up to `limit` for the exit; nil when still running.
    public func exitStatus(within limit: Duration) async -> Int32? {
        await process.exitStatus(within: limit)
    }

    /// Waits up to `limit` for the exit; SIGKILL and nil when still running then.
    public func exitStatusOrKill(within limit: Duration) async -> Int32? {
        await process.exitStatusOrKill(within: limit)
    }

    /// SIGTERM, then up to `limit` for the exit, then SIGKILL. Returns the exit status, nil when
    /// it had to be killed.
    @discardableResult
    public func terminate(within limit: Duration = .seconds(10)) async -> Int32? {
        await process.terminate(within: limit)
    }

    public var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Polls GET /healthz on 127.0.0.1:`port` until it answers 200; throws when the product exits
    /// first or `limit` passes. Its client is its own and shut down before it returns: none of its
    /// connections stays open to count against the product's connection limit.
    public func waitUntilHealthy(port: Int, within limit: Duration = .seconds(30)) async throws {
        let client = HTTPClient(eventLoopGroupProvider: .singleton)
        let health = HTTPClientRequest(url: "http://127.0.0.1:\(port)/healthz")
        let deadline = ContinuousClock.now + limit
        var problem: String? = "/healthz on port \(port) did not answer 200 within \(limit)"
        while !Task.isCancelled && ContinuousClock.now < deadline {
            if let status = await exitStatus(within: .zero) {
                problem = "exited with status \(status) before /healthz answered"
                break
            }
            if (try? await client.execute(health, timeout: .seconds(2)))?.status == .ok {
                problem = nil
                break
            }
            try? await Task.sleep(for: .milliseconds(100))
        }
        try? await client.shutdown()
        if let problem { throw NotHealthy(description: "\(problem): \(log)") }
    }

    struct NotHealthy: Error, CustomStringConvertible {
        let description: String
    }
}

extension Process {
    /// Waits up to `limit` for the exit; nil when still running.
    func exitStatus(within limit: Duration) async -> Int32? {
        let deadline = ContinuousClock.now + limit
        while isRunning && ContinuousClock.now < deadline { try? await Task.sleep(for: .milliseconds(50)) }
        return isRunning ? nil : terminationStatus
    }

    /// Waits up to `limit` for the exit; SIGKILL and nil when still running then.
    func exitStatusOrKill(within limit: Duration) async -> Int32? {
        guard let status = await exitStatus(within: limit) else {
            kill(processIdentifier, SIGKILL)
            return nil
        }
        return status
    }

    /// SIGTERM, then up to `limit` for the exit, then SIGKILL. Returns the exit status, nil when
    /// it had to be killed.
    func terminate(within limit: Duration) async -> Int32? {
        guard isRunning else { return terminationStatus }
        kill(processIdentifier, SIGTERM)
        return await exitStatusOrKill(within: limit)
    }
}

extension BuiltProduct {
    /// Starts the product with its output in a log file (never a pipe: nothing reads it while it
    /// runs), under `openFilesLimit` (soft and hard, as `ulimit -n` sets them) when given.
    public func start(_ arguments: [String] = [], environment: [String: String], openFilesLimit: Int? = nil) throws -> RunningProduct {
        let log = try OutputFile("product")
        let (executable, arguments) =
            openFilesLimit.map { ("/bin/sh", ["-c", "ulimit -n \($0) && exec \"$0\" \"$@\"", path] + arguments) } ?? (path, arguments)
        let (process, _) = try Process.started(
            executable, arguments, environment: Self.childEnvironment(environment), output: log.handle, errors: log.handle)
        return RunningProduct(process: process, logPath: log.url.path)
    }
}
