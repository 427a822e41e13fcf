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
    /// Years outside 0...9999 are not written (none are stored).
    public static func formatted(_ date: Date) -> String {
        let microseconds = Int64((date.timeIntervalSinceReferenceDate * 1_000_000).rounded()) + 978_307_200_000_000
        let milliseconds = microseconds >= 0 ? microseconds / 1000 : (microseconds - 999) / 1000
        var days = milliseconds >= 0 ? milliseconds / 86_400_000 : (milliseconds - 86_399_999) / 86_400_000
        let millisecondOfDay = milliseconds - days * 86_400_000
        // Civil date from days since 1970 (Howard Hinnant's algorithm, proleptic Gregorian).
        days += 719_468
        let era = (days >= 0 ? days : days - 146_096) / 146_097
        let dayOfEra = days - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)

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

    /// Where `formatted` puts its punctuation: `YYYY-MM-DDTHH:MM:SS.mmmZ`.
    private static let separators: [(Int, UInt8)] = [
        (4, UInt8(ascii: "-")), (7, UInt8(ascii: "-")), (10, UInt8(ascii: "T")), (13, UInt8(ascii: ":")),
        (16, UInt8(ascii: ":")), (19, UInt8(ascii: ".")), (23, UInt8(ascii: "Z")),
    ]
}
