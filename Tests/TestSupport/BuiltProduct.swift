import Foundation

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

    public struct Result: Sendable {
        public let status: Int32
        public let stdout: String
        public let stderr: String
    }

    /// Runs with the given arguments; `environment` replaces DATABASE_URL and friends (the
    /// parent's DATABASE_URL is never inherited, so a test cannot touch a real database).
    public func run(_ arguments: [String], environment: [String: String] = [:]) async throws -> Result {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        var base = ProcessInfo.processInfo.environment
        base["DATABASE_URL"] = nil
        process.environment = base.merging(environment) { $1 }
        let out = Pipe(), err = Pipe()
        process.standardOutput = out
        process.standardError = err
        let exited = AsyncStream<Int32> { continuation in
            process.terminationHandler = { continuation.yield($0.terminationStatus); continuation.finish() }
        }
        try process.run()
        // Read both pipes to the end so a chatty child never blocks on a full pipe.
        async let stdout = Task { out.fileHandleForReading.readDataToEndOfFile() }.value
        async let stderr = Task { err.fileHandleForReading.readDataToEndOfFile() }.value
        let (o, e) = await (stdout, stderr)
        var status: Int32 = -1
        for await code in exited { status = code }
        return Result(status: status, stdout: String(decoding: o, as: UTF8.self), stderr: String(decoding: e, as: UTF8.self))
    }
}
