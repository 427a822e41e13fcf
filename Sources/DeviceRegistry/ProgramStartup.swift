import Foundation
import Logging

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

    public static func bootstrapLogging(level: Logger.Level) {
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
    }
}
