import Foundation

/// The one way the service writes JSON, over HTTP, to FCM, to the database and from pushctl:
/// `JSONEncoder` with sorted keys, unescaped slashes, dates as ISO 8601 UTC with milliseconds.
/// (The worker's per-send FCM body splices a target into a message written here once per job:
/// the one fast path, measured in docs/internals.md.)
public enum WireJSON {
    /// `value` as JSON. Our own values, whose numbers are all finite, always encode.
    public static func encoded(_ value: some Encodable) -> Data {
        try! encoder.encode(value)
    }

    /// `string` as a JSON string literal, quotes included, escaped as JSON requires.
    public static func quoted(_ string: String) -> String {
        String(decoding: encoded(string), as: UTF8.self)
    }

    /// Shared: every caller writes the same shape.
    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(formatted(date))
        }
        return encoder
    }()

    /// `2026-11-21T20:59:33.388Z`: UTC, milliseconds truncated. PostgreSQL's times have whole
    /// microseconds, so the date is rounded to the microsecond first: Foundation's formatter
    /// truncates the binary fraction and prints `.387` for a stored `.388000` now and then.
    /// A year outside 0000...9999 (PostgreSQL holds 4713 BC to 294276 AD, and ±infinity) is
    /// written with a sign and six digits, as JavaScript's `toISOString` does: `+012345-…`,
    /// `-000001-…`.
    public static func formatted(_ date: Date) -> String {
        let seconds = date.timeIntervalSince1970
        guard seconds >= -62_167_219_200 && seconds < 253_402_300_800 else { return expandedYear(seconds) }
        let microseconds = Int64((date.timeIntervalSinceReferenceDate * 1_000_000).rounded()) + 978_307_200_000_000
        let milliseconds = microseconds >= 0 ? microseconds / 1000 : (microseconds - 999) / 1000
        let days = milliseconds >= 0 ? milliseconds / 86_400_000 : (milliseconds - 86_399_999) / 86_400_000
        let millisecondOfDay = milliseconds - days * 86_400_000
        let (year, month, day) = ISO8601Time.civil(days: days)

        return String(unsafeUninitializedCapacity: 24) { text in
            func put(_ value: Int64, at offset: Int, digits: Int) {
                var value = value
                for position in (offset..<offset + digits).reversed() {
                    text[position] = UInt8(ascii: "0") + UInt8(value % 10)
                    value /= 10
                }
            }
            put(year, at: 0, digits: 4)
            put(month, at: 5, digits: 2)
            put(day, at: 8, digits: 2)
            put(millisecondOfDay / 3_600_000, at: 11, digits: 2)
            put(millisecondOfDay / 60_000 % 60, at: 14, digits: 2)
            put(millisecondOfDay / 1000 % 60, at: 17, digits: 2)
            put(millisecondOfDay % 1000, at: 20, digits: 3)
            for (offset, separator) in separators { text[offset] = separator }
            return 24
        }
    }

    /// ``formatted(_:)`` beyond four-digit years, to the millisecond a double still holds there;
    /// past PostgreSQL's range (its infinities), its first or last moment.
    private static func expandedYear(_ seconds: Double) -> String {
        let bounded = seconds.isNaN ? 0 : min(max(seconds, -210_835_180_800), 9_224_318_015_999.999)
        let days = Int64((bounded / 86_400).rounded(.down))
        let millisecondOfDay = min(max(Int64(((bounded - Double(days) * 86_400) * 1000).rounded(.down)), 0), 86_399_999)
        let (year, month, day) = ISO8601Time.civil(days: days)
        func padded(_ value: Int64, _ digits: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, digits - text.count)) + text
        }
        return (year < 0 ? "-" : "+") + padded(abs(year), 6) + "-" + padded(month, 2) + "-" + padded(day, 2) + "T"
            + padded(millisecondOfDay / 3_600_000, 2) + ":" + padded(millisecondOfDay / 60_000 % 60, 2) + ":"
            + padded(millisecondOfDay / 1000 % 60, 2) + "." + padded(millisecondOfDay % 1000, 3) + "Z"
    }

    /// Where `formatted` puts its punctuation: `YYYY-MM-DDTHH:MM:SS.mmmZ`.
    private static let separators: [(Int, UInt8)] = [
        (4, UInt8(ascii: "-")), (7, UInt8(ascii: "-")), (10, UInt8(ascii: "T")), (13, UInt8(ascii: ":")),
        (16, UInt8(ascii: ":")), (19, UInt8(ascii: ".")), (23, UInt8(ascii: "Z")),
    ]
}
