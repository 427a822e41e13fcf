import Logging

/// swift-log's stream handler on stderr, with two differences. Metadata set on a logger is kept
/// as it is and formatted only when a line is written: the stream handler re-formats all of a
/// logger's metadata each time a key is set, which push-api does three times per request
/// (request id, user, app) for lines that the configured level mostly never writes. And every
/// message and metadata value is made safe to write (``loggable(_:)``): values come from
/// requests (a JWT's `alg`, a path, a database's or FCM's error text), and one holding a newline
/// or `key=value` text would otherwise forge lines or fields.
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
        event.metadata = metadata.merging(event.metadata ?? [:]) { _, explicit in explicit }.mapValues { .string(Self.loggable("\($0)")) }
        event.message = "\(Self.loggable("\(event.message)", quoting: false))"
        stream.log(event: event)
    }

    /// The longest value written, in characters: what is cut is marked with `…`.
    public static let longestValue = 1024

    /// `text` as one line can hold it: control characters (newlines, ANSI escapes, DEL, C1) as
    /// `\n`, `\r`, `\t` or `\u{…}`, a backslash doubled; cut to ``longestValue``. With
    /// `quoting`, a value holding a space, `=` or `"` is written in quotes (a quote escaped), so
    /// that it cannot pass for more fields.
    public static func loggable(_ text: String, quoting: Bool = true) -> String {
        var escaped = ""
        var needsQuotes = false
        var count = 0
        for scalar in text.unicodeScalars {
            if count == longestValue {
                escaped += "…"
                break
            }
            count += 1
            switch scalar {
            case "\n": escaped += "\\n"
            case "\r": escaped += "\\r"
            case "\t": escaped += "\\t"
            case "\\": escaped += "\\\\"
            case "\"":
                needsQuotes = true
                escaped += quoting ? "\\\"" : "\""
            case " ", "=":
                needsQuotes = true
                escaped.unicodeScalars.append(scalar)
            default:
                if scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) || scalar == "\u{2028}" || scalar == "\u{2029}" {
                    escaped += "\\u{\(String(scalar.value, radix: 16))}"
                } else {
                    escaped.unicodeScalars.append(scalar)
                }
            }
        }
        return quoting && needsQuotes ? "\"\(escaped)\"" : escaped
    }
}
