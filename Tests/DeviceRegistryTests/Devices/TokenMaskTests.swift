import DeviceRegistry
import Testing

@Suite("Token masking: at most 20 characters, never more than half")
struct TokenMaskTests {
    /// A token of `length` characters `t0`…, each position its own character so a shown
    /// character cannot be mistaken for another.
    static func token(_ length: Int) -> String {
        String((0..<length).map { Character(UnicodeScalar(UInt8(33 + $0 % 94))) })
    }

    @Test(arguments: [(0, 0), (1, 0), (3, 1), (20, 10), (21, 10), (40, 20), (41, 20), (163, 20)])
    func showsTheFirstHalfUpToTwentyCharacters(_ length: Int, _ shown: Int) {
        let token = Self.token(length)
        let masked = maskedToken(token)
        #expect(masked == String(token.prefix(shown)) + "…")
        #expect(masked.count - 1 <= 20 && (masked.count - 1) * 2 <= length)
    }

    @Test func countsCharactersNotBytes() {
        #expect(maskedToken("ééééé") == "éé…")
        #expect(maskedToken("abc") == "a…")
    }
}
