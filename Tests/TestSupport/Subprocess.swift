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
        let log = try OutputFile("subprocess")
        defer { log.remove() }
        let (process, exited) = try Process.started(
            executable, arguments, environment: ProcessInfo.processInfo.environment.merging(environment) { $1 },
            directory: directory, output: log.handle, errors: log.handle)
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
        guard let status else {
            process.terminate()
            throw TimedOut(command: ([executable] + arguments).joined(separator: " "), output: log.text)
        }
        return Run(status: status, output: log.text)
    }
}

/// An empty file for a child's output. A file, never a pipe: a pipe's end comes only when every
/// process holding its write end has closed it, and a child another test starts meanwhile
/// inherits those ends, so reading to the end would wait for that other child too.
struct OutputFile {
    let url: URL
    let handle: FileHandle

    init(_ prefix: String) throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("\(prefix)-\(UUID().uuidString).log")
        try Data().write(to: url)
        handle = try FileHandle(forWritingTo: url)
    }

    /// What the child wrote; read once it has exited.
    var text: String { (try? String(contentsOf: url, encoding: .utf8)) ?? "" }

    func remove() {
        try? handle.close()
        try? FileManager.default.removeItem(at: url)
    }
}

extension Process {
    /// Starts `executable` with exactly `environment`, its output to these handles; `exited`
    /// yields its exit status once it has ended.
    static func started(
        _ executable: String, _ arguments: [String], environment: [String: String], directory: String? = nil,
        output: FileHandle, errors: FileHandle, input: FileHandle? = nil
    ) throws -> (process: Process, exited: AsyncStream<Int32>) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.environment = environment
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        process.standardOutput = output
        process.standardError = errors
        if let input { process.standardInput = input }
        let exited = AsyncStream<Int32> { continuation in
            process.terminationHandler = {
                continuation.yield($0.terminationStatus)
                continuation.finish()
            }
        }
        try process.run()
        return (process, exited)
    }
}
