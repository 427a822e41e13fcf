import Logging

/// swift-log's stream handler on stderr, with one difference: metadata set on a logger is kept
/// as it is and formatted only when a line is written. The stream handler re-formats all of a
/// logger's metadata each time a key is set, which push-api does three times per request
/// (request id, user, app) for lines that the configured level mostly never writes.
public struct StandardErrorLogHandler: LogHandler {
    private var stream: StreamLogHandler
    public var metadata: Logger.Metadata = [:]

    public init(label: String, level: Logger.Level) {
        stream = StreamLogHandler.standardError(label: label)
        stream.logLevel = level
    }

    public var logLevel: Logger.Level {
        get { stream.logLevel }
        set { stream.logLevel = newValue }
    }

    public var metadataProvider: Logger.MetadataProvider? {
        get { stream.metadataProvider }
        set { stream.metadataProvider = newValue }
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var event = event
        // The line's own metadata wins over the logger's, as in the stream handler.
        event.metadata = metadata.merging(event.metadata ?? [:]) { _, explicit in explicit }
        stream.log(event: event)
    }
}
