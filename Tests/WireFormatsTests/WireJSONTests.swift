import Foundation
import Testing
import WireFormats

@Suite("The one JSON shape the service writes")
struct WireJSONTests {
    @Test func datesAreUTCWithTheStoredMilliseconds() {
        var random = SystemRandomNumberGenerator()
        let whole = Date.ISO8601FormatStyle(timeZone: .gmt)
        for _ in 0..<20_000 {
            // A time as PostgreSQL stores it: whole microseconds, 1970 to 2100.
            let microseconds = Int64.random(in: 0..<4_102_444_800_000_000, using: &random)
            let date = Date(timeIntervalSince1970: Double(microseconds) / 1_000_000)
            let seconds = Date(timeIntervalSince1970: Double(microseconds / 1_000_000))
            var expected = seconds.formatted(whole)
            expected.removeLast()  // the "Z"
            let millisecond = microseconds / 1000 % 1000
            expected += "." + String(repeating: "0", count: 3 - String(millisecond).count) + String(millisecond) + "Z"
            #expect(WireJSON.formatted(date) == expected)
        }
        #expect(WireJSON.formatted(Date(timeIntervalSince1970: 1_763_758_773.388)) == "2025-11-21T20:59:33.388Z")
        #expect(WireJSON.formatted(Date(timeIntervalSince1970: -0.001)) == "1969-12-31T23:59:59.999Z")
        #expect(WireJSON.formatted(Date(timeIntervalSince1970: 951_782_400)) == "2000-02-29T00:00:00.000Z")
    }

    /// PostgreSQL holds years from 4713 BC to 294276 (and SQL can store them): formatting one
    /// must never stop the program (a year 0 date once trapped in every job listing).
    @Test func yearsBeyondFourDigitsGetASignAndSixDigits() {
        #expect(WireJSON.formatted(Date(timeIntervalSince1970: -62_167_219_200)) == "0000-01-01T00:00:00.000Z")
        #expect(WireJSON.formatted(Date(timeIntervalSince1970: 253_402_300_799.5)) == "9999-12-31T23:59:59.500Z")
        #expect(WireJSON.formatted(Date(timeIntervalSince1970: -62_167_219_201)) == "-000001-12-31T23:59:59.000Z")
        #expect(WireJSON.formatted(Date(timeIntervalSince1970: 253_402_300_800)) == "+010000-01-01T00:00:00.000Z")
        #expect(WireJSON.formatted(Date(timeIntervalSince1970: 9_224_318_015_999)) == "+294276-12-31T23:59:59.000Z")
        #expect(WireJSON.formatted(Date(timeIntervalSince1970: -210_835_180_800)) == "-004712-11-24T00:00:00.000Z")
        // Further out (PostgreSQL's infinities arrive so): its last and first moments.
        #expect(WireJSON.formatted(.distantFuture.addingTimeInterval(1e15)).hasPrefix("+294276-12-31T23:59:59."))
        #expect(WireJSON.formatted(Date(timeIntervalSince1970: -1e300)) == "-004712-11-24T00:00:00.000Z")
    }

    @Test func keysSortedSlashesUnescaped() {
        let value = JSONValue.object([
            "b": .string("a/b\"\\\u{1}"), "a": .array([.integer(-1), .number(Decimal(string: "1.5")!), .bool(true), .null]),
        ])
        #expect(String(decoding: WireJSON.encoded(value), as: UTF8.self) == #"{"a":[-1,1.5,true,null],"b":"a/b\"\\\u0001"}"#)
        #expect(WireJSON.quoted("quo\"te/") == #""quo\"te/""#)
    }
}
