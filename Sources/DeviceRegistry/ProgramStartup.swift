import Foundation
import Logging
import NIOCore

/// What push-api and push-worker do around their own work: log to stderr at the configured
/// level, and turn a failure into one line naming the program (never a stack trace).
public enum ProgramStartup {
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
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
    }
}
