import Foundation

/// Times as operators and services write them: ISO 8601 with a zone, with or without fractions
/// of a second (`2026-12-01T09:00:00Z`, `2026-12-01T10:00:00.250+01:00`).
public enum ISO8601Time {
    /// `text` is not such a time; the message names the field or option it came from.
    public struct Invalid: Error, CustomStringConvertible {
        public let field: String
        public let text: String
        public var description: String { "\(field) '\(text)' is not an ISO 8601 time with a zone, such as 2026-12-01T09:00:00Z" }
    }

    public static func parse(_ text: String, field: String) throws(Invalid) -> Date {
        guard let date = parse(text) else { throw Invalid(field: field, text: text) }
        return date
    }

    public static func parse(_ text: String) -> Date? {
        if let date = try? Date(text, strategy: .iso8601) { return date }
        return try? Date(text, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }
}
