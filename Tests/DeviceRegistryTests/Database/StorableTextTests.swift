import DeviceRegistry
import Testing

@Suite("Text as a text column holds it")
struct StorableTextTests {
    @Test func nulBecomesTheReplacementCharacter() {
        #expect("refused\0here".storable(upTo: 500) == "refused\u{FFFD}here")
        #expect("\0\0".storable(upTo: 500) == "\u{FFFD}\u{FFFD}")
    }

    @Test func longTextIsCutAtTheLimitInCharacters() {
        #expect(String(repeating: "é", count: 600).storable(upTo: 500) == String(repeating: "é", count: 500))
        #expect("ab\0cd".storable(upTo: 3) == "ab\u{FFFD}")
        // Within the limit in characters though not in bytes: kept whole.
        #expect(String(repeating: "é", count: 400).storable(upTo: 500) == String(repeating: "é", count: 400))
    }

    @Test func textWithinTheLimitIsKeptAsItIs() {
        #expect("UNREGISTERED".storable(upTo: 500) == "UNREGISTERED")
        #expect("".storable(upTo: 0) == "")
    }
}
