import Foundation
import Testing
import WireFormats

@Suite("ISO 8601 times as the API and pushctl read them")
struct ISO8601TimeTests {
    @Test func timesWithAZoneAndAnyFraction() throws {
        #expect(ISO8601Time.parse("2026-12-01T09:00:00Z") == Date(timeIntervalSince1970: 1_796_115_600))
        #expect(ISO8601Time.parse("2026-12-01t09:00:00z") == Date(timeIntervalSince1970: 1_796_115_600))
        #expect(ISO8601Time.parse("2026-12-01T10:00:00+01:00") == Date(timeIntervalSince1970: 1_796_115_600))
        #expect(ISO8601Time.parse("2026-12-01T04:30:00-04:30") == Date(timeIntervalSince1970: 1_796_115_600))
        let fraction = try #require(ISO8601Time.parse("2026-12-01T10:00:00.250+01:00"))
        #expect(abs(fraction.timeIntervalSince1970 - 1_796_115_600.25) < 1e-6)
        let nanoseconds = try #require(ISO8601Time.parse("1970-01-01T00:00:00.123456789Z"))
        #expect(abs(nanoseconds.timeIntervalSince1970 - 0.123456789) < 1e-6)
        #expect(ISO8601Time.parse("2024-02-29T23:59:59Z") == Date(timeIntervalSince1970: 1_709_251_199))
        #expect(ISO8601Time.parse("2000-02-29T00:00:00Z") == Date(timeIntervalSince1970: 951_782_400))
    }

    /// Dates before the Gregorian reform are read in the proleptic Gregorian calendar, as
    /// PostgreSQL does (Foundation read them as Julian dates, ten days and more apart).
    @Test func earlyYearsAreProlepticGregorian() {
        #expect(ISO8601Time.parse("0001-01-01T00:00:00Z") == Date(timeIntervalSince1970: -62_135_596_800))
        #expect(ISO8601Time.parse("1500-06-01T00:00:00Z") == Date(timeIntervalSince1970: -14_818_723_200))
        #expect(ISO8601Time.parse("9999-12-31T23:59:59Z") == Date(timeIntervalSince1970: 253_402_300_799))
    }

    /// What Foundation's parser let through: text after the zone, impossible dates rolled over,
    /// year 0, no zone, a zone without its colon.
    @Test(arguments: [
        "2030-01-01T00:00:00Zgarbage", "2030-01-01T00:00:00Z\u{0}junk", "2030-01-01T00:00:00+0100", "2030-01-01T00:00:00+01:00xyz",
        "2030-02-30T00:00:00Z", "2029-02-29T00:00:00Z", "2030-04-31T00:00:00Z", "2030-13-01T00:00:00Z", "2030-00-10T00:00:00Z",
        "2030-01-01T24:00:00Z", "2030-01-01T00:60:00Z", "2030-01-01T00:00:60Z", "2030-01-01T00:00:00+24:00", "0000-01-01T00:00:00Z",
        "2030-01-01T00:00:00", "2030-01-01 00:00:00Z", "2030-01-01", "2030-01-01T00:00:00.Z", "2030-01-01T00:00:00.1234567891Z",
        "+2030-01-01T00:00:00Z", "20300-01-01T00:00:00Z", "２０３０-01-01T00:00:00Z", "", "now",
    ])
    func anythingElseIsRefused(_ text: String) {
        #expect(ISO8601Time.parse(text) == nil)
        #expect(throws: ISO8601Time.Invalid.self) { try ISO8601Time.parse(text, field: "sendAt") }
    }

    @Test func theRefusalNamesTheFieldAndShowsAShortenedText() {
        let error = #expect(throws: ISO8601Time.Invalid.self) {
            try ISO8601Time.parse(String(repeating: "x", count: 100_000), field: "--at")
        }
        #expect(error?.description.hasPrefix("--at '" + String(repeating: "x", count: 64) + "…' is not an ISO 8601 time") == true)
        #expect((error?.description.count ?? 0) < 200)
    }
}
