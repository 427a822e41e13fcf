import Foundation

/// A child process run to its end, stdout and stderr together in a file (never a pipe nobody reads).
public enum Subprocess {
    public struct Run: Sendable {
        public var status: Int32
        public var output: String
    }

    public struct TimedOut: Error, CustomStringConvertible {
        public var command: String
        public var output: String
        public var description: String { "\(command) did not finish in time:\n\(output)" }
    }

    /// Runs `executable` with this process's environment plus `environment`, in `directory` when
    /// given; past `timeLimit` the child is terminated and `TimedOut` thrown with what it printed.
    public static func run(
        _ executable: String, _ arguments: [String], environment: [String: String] = [:],
        directory: String? = nil, timeLimit: Duration
    ) async throws -> Run {
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("subprocess-\(UUID().uuidString).log")
        try Data().write(to: log)
        defer { try? FileManager.default.removeItem(at: log) }
        let handle = try FileHandle(forWritingTo: log)
        defer { try? handle.close() }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 }
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        process.standardOutput = handle
        process.standardError = handle
        let exited = AsyncStream<Int32> { continuation in
            process.terminationHandler = {
                continuation.yield($0.terminationStatus)
                continuation.finish()
            }
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
