import Foundation

/// Times as operators and services write them: ISO 8601 with a zone, with or without fractions
/// of a second (`2026-12-01T09:00:00Z`, `2026-12-01T10:00:00.250+01:00`).
public enum ISO8601Time {
    public static func parse(_ text: String) -> Date? {
        if let date = try? Date(text, strategy: .iso8601) { return date }
        return try? Date(text, strategy: Date.ISO8601FormatStyle(includingFractionalSeconds: true))
    }
}
