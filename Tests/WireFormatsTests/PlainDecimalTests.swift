import Testing
import WireFormats

@Suite("Ids written as plain decimal digits")
struct PlainDecimalTests {
    @Test func readsPlainDigitsInRange() {
        #expect(Int64(plainDecimal: "42") == 42)
        #expect(Int64(plainDecimal: "0") == 0)
        #expect(Int64(plainDecimal: "-7") == -7)
        #expect(Int64(plainDecimal: "9223372036854775807") == Int64.max)
        #expect(Int64(plainDecimal: "-9223372036854775808") == Int64.min)
    }

    /// Every other spelling of a number, and what is not one, is nil.
    @Test(arguments: ["+42", "042", "00", "-0042", "", "-", " 42", "42 ", "4_2", "4e2", "٤٢", "9223372036854775808", "0x2A"])
    func refusesAnyOtherSpelling(_ text: String) {
        #expect(Int64(plainDecimal: text) == nil)
    }
}
