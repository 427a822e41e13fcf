import Foundation
import Testing

@testable import WireFormats

@Suite("The strict JSON reader: registration bodies, access tokens, pushctl options")
struct JSONParserTests {
    static func parse(_ text: String) throws(JSONSyntaxError) -> JSONValue {
        try JSONParser.parse(Array(text.utf8))
    }

    @Test func readsEveryKindOfValue() throws {
        let value = try Self.parse(
            #" { "s" : "a\"b\\c\/d\b\f\n\r\t\u00e9\ud83d\ude00" , "i":-42, "z":0, "big":9223372036854775808,"#
                + #" "f":1.5e3, "t":true, "n":null, "a":[ [], {}, false ] } "#)
        #expect(
            value
                == .object([
                    "s": .string("a\"b\\c/d\u{8}\u{C}\n\r\té😀"),
                    "i": .integer(-42),
                    "z": .integer(0),
                    "big": .number(Decimal(string: "9223372036854775808")!),
                    "f": .number(1500),
                    "t": .bool(true),
                    "n": .null,
                    "a": .array([.array([]), .object([:]), .bool(false)]),
                ]))
        #expect(try Self.parse(#""plain""#) == .string("plain"))
        #expect(try Self.parse(#"{"k":1,"k":2}"#) == .object(["k": .integer(2)]))
        // What a client sends says one thing per member, nested objects included.
        do {
            _ = try JSONParser.parse(Array(#"{"a":{"k":1,"k":2}}"#.utf8), refusingRepeatedMembers: true)
            Issue.record("a repeated member was taken")
        } catch {
            #expect(error.description == #"the member "k" given twice, at line 1, column 13"#)
        }
        #expect(
            try JSONParser.parse(Array(#"{"k":{"k":1}}"#.utf8), refusingRepeatedMembers: true)
                == .object(["k": .object(["k": .integer(1)])]))
        #expect(try Self.parse("\"é\"") == .string("é"))
    }

    @Test(arguments: [
        "", " ", "{", "}", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "{a:1}", "{\"a\":1}x", "[1 2]", "01", "-", "1.", ".5", "1e", "+1",
        "tru", "nul", "True", "\"unterminated", "\"tab\there\"", "\"\\x\"", "\"\\u12\"", "\"\\u00zz\"",
        "\"\\ud83d\"", "\"\\ud83d\\u0041\"", "\"\\ude00\"", "'single'", "NaN", "1e400", "[" + String(repeating: "[", count: 80) + "]",
    ])
    func refusesWhatIsNotJSON(_ text: String) {
        #expect(throws: JSONSyntaxError.self) { try Self.parse(text) }
    }

    @Test func refusesInvalidUTF8() {
        #expect(throws: JSONSyntaxError.self) { try JSONParser.parse([0x22, 0xC3, 0x28, 0x22]) }
        #expect(throws: JSONSyntaxError.self) { try JSONParser.parse([0x22, 0x5C, 0x6E, 0xFF, 0x22]) }
    }

    @Test func agreesWithFoundationOnARegistrationBody() throws {
        let body = #"{"token":"fcm:APA91b\u0041-_x","platform":"android","deviceId":"Pixel \"8\" 🙂","tokenType":null}"#
        let foundation = try JSONSerialization.jsonObject(with: Data(body.utf8)) as! [String: Any]
        let ours = try Self.parse(body)
        #expect(ours["token"] == .string(foundation["token"] as! String))
        #expect(ours["deviceId"] == .string(foundation["deviceId"] as! String))
        #expect(ours["tokenType"] == .null)
    }

    /// What went wrong and where, for a person to find it in what they typed.
    @Test(arguments: [
        ("", "it ends too early, at line 1, column 1"),
        (#"{"notification":{"title":"Hi"}"#, "it ends too early, at line 1, column 31"),
        (#"{"a":1,}"#, "unexpected '}' at line 1, column 8"),
        ("{\n  \"a\": tru}", "unexpected '}' at line 2, column 11"),
        (#"{"é":"x" "b":1}"#, "unexpected '\"' at line 1, column 10"),
        ("\"tab\there\"", "unexpected control character 0x9 at line 1, column 5"),
        (#""\x""#, "unexpected 'x' at line 1, column 3"),
        (#""\u12"#, "it ends too early, at line 1, column 6"),
        (#"["\ud83d"]"#, "invalid UTF-8 or a lone surrogate in the string at line 1, column 3"),
        ("{'a':1}", "unexpected ''' at line 1, column 2"),
        ("[1] x", "unexpected 'x' at line 1, column 5"),
        ("[1e400]", "a number out of range at line 1, column 2"),
        (
            #"{"n":123456789012345678901234567890123456789}"#,
            "a number with more than 38 significant digits at line 1, column 6 (send it as a string)"
        ),
        (String(repeating: "[", count: 40), "more than 32 nested arrays and objects at line 1, column 33"),
    ])
    func saysWhatIsWrongAndWhere(_ text: String, _ description: String) {
        #expect(throws: JSONSyntaxError.self) { try Self.parse(text) }
        do {
            _ = try Self.parse(text)
        } catch {
            #expect(error.description == description)
        }
    }

    /// A number is kept exactly or refused: `Decimal` holds 38 significant digits, and
    /// rounded a longer one without a word (a message's APNs payload would change on its way).
    @Test func numbersAreExactUpTo38SignificantDigitsAndRefusedBeyond() throws {
        for text in [
            "12345678901234567890123456789012345678", "-0.00012345678901234567890123456789012345678",
            "1234567890123456789012345678901234567800000", "9.9999999999999999999999999999999999999e-50", "100.00",
        ] {
            guard case .number(let value) = try Self.parse(text) else {
                Issue.record("\(text) is not a number")
                continue
            }
            #expect(value == Decimal(string: text, locale: nil), "\(text)")
            #expect(JSONParser.significantDigits(of: text) <= 38, "\(text)")
        }
        #expect(JSONParser.significantDigits(of: "-0.00012345678901234567890123456789012345678e+5") == 38)
        #expect(JSONParser.significantDigits(of: "0.0") == 0 && JSONParser.significantDigits(of: "100.00") == 1)
        for text in [
            "123456789012345678901234567890123456789", "1.00000000000000000000000000000000000001",
            "-12345678901234567890123456789012345678.9e3",
        ] {
            #expect(throws: JSONSyntaxError.self, "\(text)") { try Self.parse(text) }
        }
    }

    @Test func namesBytesThatAreNotVisibleASCII() {
        do {
            _ = try JSONParser.parse([0x5B, 0xC3, 0xA9, 0x5D])
            Issue.record("a byte of a multi-byte character outside a string was accepted")
        } catch {
            #expect(error.description == "unexpected byte 0xC3 at line 1, column 2")
        }
    }
}
