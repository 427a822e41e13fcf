import Logging
import Synchronization

/// Every line a logger writes, message and metadata, for tests of what logs may hold.
public final class CapturedLog: Sendable {
    public init() {}

    /// Each line as `level message [metadata]`.
    public var lines: [String] { captured.withLock { $0 } }

    private let captured = Mutex<[String]>([])

    public var text: String { captured.withLock { $0.joined(separator: "\n") } }

    public func logger(level: Logger.Level = .debug) -> Logger {
        var logger = Logger(label: "captured") { _ in Handler(log: self) }
        logger.logLevel = level
        return logger
    }

    private struct Handler: LogHandler {
        let log: CapturedLog
        var metadata: Logger.Metadata = [:]
        var metadataProvider: Logger.MetadataProvider?
        var logLevel: Logger.Level = .trace

        subscript(metadataKey key: String) -> Logger.Metadata.Value? {
            get { metadata[key] }
            set { metadata[key] = newValue }
        }

        func log(event: LogEvent) {
            let all = metadata.merging(event.metadata ?? [:]) { $1 }
            log.captured.withLock { $0.append("\(event.level) \(event.message) \(all)") }
        }
    }
}
