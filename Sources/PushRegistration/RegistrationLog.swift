import Foundation

#if canImport(os)
    import os
#endif

public enum LogLevel: Sendable, Equatable, Comparable {
    case debug, info, warning, error
}

/// Where the library's lines go. Failures are silent to the user and logged here; a line never
/// holds an access token, and an FCM token only masked (`masked(_:)`).
public struct RegistrationLog: Sendable {
    public let write: @Sendable (LogLevel, String) -> Void

    public init(_ write: @escaping @Sendable (LogLevel, String) -> Void) {
        self.write = write
    }

    /// The unified log on Apple platforms, standard error elsewhere.
    public static var standard: RegistrationLog {
        #if canImport(os)
            return .unified
        #else
            return RegistrationLog { level, message in
                FileHandle.standardError.write(Data("push-registration \(level): \(message)\n".utf8))
            }
        #endif
    }

    /// Nothing is written.
    public static let silent = RegistrationLog { _, _ in }

    #if canImport(os)
        /// The unified log (Console.app, `log stream`), subsystem `push-registration`.
        public static let unified: RegistrationLog = {
            let logger = Logger(subsystem: "push-registration", category: "registration")
            return RegistrationLog { level, message in
                switch level {
                case .debug: logger.debug("\(message, privacy: .public)")
                case .info: logger.info("\(message, privacy: .public)")
                case .warning: logger.warning("\(message, privacy: .public)")
                case .error: logger.error("\(message, privacy: .public)")
                }
            }
        }()
    #endif
}

/// A token as a log line may show it: its first 6 and last 4 characters, never more than half of
/// a short one.
func masked(_ token: String) -> String {
    let shown = min(6, token.count / 4)
    let tail = min(4, token.count / 4)
    return "\(token.prefix(shown))…\(token.suffix(tail)) (\(token.count) chars)"
}
