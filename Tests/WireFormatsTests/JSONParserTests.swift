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

    @Test func namesBytesThatAreNotVisibleASCII() {
        do {
            _ = try JSONParser.parse([0x5B, 0xC3, 0xA9, 0x5D])
            Issue.record("a byte of a multi-byte character outside a string was accepted")
        } catch {
            #expect(error.description == "unexpected byte 0xC3 at line 1, column 2")
        }
    }
}
