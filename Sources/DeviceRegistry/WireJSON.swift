import Foundation

/// The one JSON shape the service writes, over HTTP and from pushctl: sorted keys, unescaped
/// slashes, dates as ISO 8601 UTC with milliseconds.
public enum WireJSON {
    public static func makeEncoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(formatted(date))
        }
        return encoder
    }

    public static func formatted(_ date: Date) -> String {
        date.formatted(isoFormat)
    }

    private static let isoFormat = Date.ISO8601FormatStyle(includingFractionalSeconds: true, timeZone: .gmt)
}
