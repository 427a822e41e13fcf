import Foundation

/// Times as operators and services write them: ISO 8601 with a zone, with or without fractions
/// of a second (`2026-12-01T09:00:00Z`, `2026-12-01T10:00:00.250+01:00`).
public enum ISO8601Time {
    /// `text` is not such a time; the message names the field or option it came from.
    public struct Invalid: Error, CustomStringConvertible {
        public let field: String
        public let text: String
        public var description: String {
            "\(field) '\(text.prefix(64))\(text.count > 64 ? "…" : "")' is not an ISO 8601 time with a zone, such as 2026-12-01T09:00:00Z"
        }
    }

    public static func parse(_ text: String, field: String) throws(Invalid) -> Date {
        guard let date = parse(text) else { throw Invalid(field: field, text: text) }
        return date
    }

    /// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`, years 0001 to 9999, read field by field as
    /// PostgreSQL reads them (proleptic Gregorian). Foundation's parser ignores text after the
    /// zone, rolls 2030-02-30 over into March and reads dates before 1582 as Julian ones.
    public static func parse(_ text: String) -> Date? {
        let bytes = Array(text.utf8)
        func number(_ start: Int, digits: Int) -> Int? {
            guard start + digits <= bytes.count else { return nil }
            var value = 0
            for byte in bytes[start..<start + digits] {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) else { return nil }
                value = value * 10 + Int(byte - UInt8(ascii: "0"))
            }
            return value
        }
        func byte(_ index: Int, is expected: Character...) -> Bool {
            index < bytes.count && expected.contains { $0.asciiValue == bytes[index] }
        }
        guard let year = number(0, digits: 4), byte(4, is: "-"), let month = number(5, digits: 2), byte(7, is: "-"),
            let day = number(8, digits: 2), byte(10, is: "T", "t"), let hour = number(11, digits: 2), byte(13, is: ":"),
            let minute = number(14, digits: 2), byte(16, is: ":"), let second = number(17, digits: 2)
        else { return nil }
        var index = 19
        var nanoseconds = 0
        if byte(index, is: ".") {
            var digits = 0
            while let digit = number(index + 1 + digits, digits: 1) {
                guard digits < 9 else { return nil }
                nanoseconds = nanoseconds * 10 + digit
                digits += 1
            }
            guard digits > 0 else { return nil }
            for _ in digits..<9 { nanoseconds *= 10 }
            index += 1 + digits
        }
        var offset = 0
        if byte(index, is: "Z", "z") {
            index += 1
        } else if byte(index, is: "+", "-") {
            guard let hours = number(index + 1, digits: 2), byte(index + 3, is: ":"), let minutes = number(index + 4, digits: 2),
                hours <= 23, minutes <= 59
            else { return nil }
            offset = (hours * 3600 + minutes * 60) * (bytes[index] == UInt8(ascii: "-") ? -1 : 1)
            index += 6
        } else {
            return nil
        }
        guard index == bytes.count, year >= 1, (1...12).contains(month), day >= 1, day <= daysIn(month: month, year: year),
            hour <= 23, minute <= 59, second <= 59
        else { return nil }
        let seconds = Int64(days(year: year, month: month, day: day)) * 86_400 + Int64(hour * 3600 + minute * 60 + second - offset)
        return Date(timeIntervalSince1970: Double(seconds) + Double(nanoseconds) / 1e9)
    }

    private static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (Howard Hinnant's
    /// algorithm); ``civil(days:)`` is its inverse.
    static func days(year: Int, month: Int, day: Int) -> Int {
        let shiftedYear = month <= 2 ? year - 1 : year
        let era = (shiftedYear >= 0 ? shiftedYear : shiftedYear - 399) / 400
        let yearOfEra = shiftedYear - era * 400
        let dayOfYear = (153 * ((month + 9) % 12) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    static func civil(days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let shifted = days + 719_468
        let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }
}
