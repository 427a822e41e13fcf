import Testing

@testable import PushAPI

/// Urlencoded forms read as the WHATWG URL Standard reads them, and only as UTF-8 text.
@Suite("Urlencoded console forms")
struct FormBodyTests {
    static func form(_ text: String) -> FormBody? { FormBody(Array(text.utf8)) }

    @Test func namesAndValuesAreDecodedAndRepeatedNamesKeptInOrder() throws {
        let form = try #require(Self.form("name=News+%3Cdaily%3E&platform=ios&platform=web&empty=&bare&price=5%E2%82%AC"))
        #expect(form["name"] == "News <daily>")
        #expect(form.values["platform"] == ["ios", "web"])
        #expect(form["empty"] == "" && form["bare"] == "")
        #expect(form["price"] == "5€")
        #expect(form["absent"] == nil)
    }

    /// A `%` not followed by two hex digits is itself, as browsers read it.
    @Test func aPercentSignWithoutTwoHexDigitsIsKept() throws {
        let form = try #require(Self.form("a=100%&b=%ZZ&c=%4&d=%41"))
        #expect(form["a"] == "100%" && form["b"] == "%ZZ" && form["c"] == "%4" && form["d"] == "A")
    }

    /// Raw UTF-8 is taken as it is (curl --data sends it so); bytes that are not UTF-8, raw or
    /// escaped, refuse the whole form rather than being kept as `%FF` or U+FFFD.
    @Test func textThatIsNotUTF8RefusesTheForm() {
        #expect(Self.form("name=Caf\u{E9}")?["name"] == "Café")
        #expect(Self.form("name=%FF") == nil)
        #expect(Self.form("n%C3=x") == nil)
        #expect(Self.form("name=%ED%A0%80") == nil, "a lone surrogate's encoding")
        #expect(FormBody([UInt8]("name=".utf8) + [0xC3]) == nil)
    }
}
