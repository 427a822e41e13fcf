import Testing
import WireFormats

@Suite("ASCII hex digits")
struct HexDigitTests {
    @Test func everyByteIsItsHexValueOrNil() {
        let digits = Array("0123456789abcdef".utf8)
        for byte in UInt8.min...UInt8.max {
            let expected = digits.firstIndex(of: byte) ?? Array("ABCDEF".utf8).firstIndex(of: byte).map { $0 + 10 }
            #expect(byte.hexDigitValue == expected.map(UInt8.init), "byte \(byte)")
        }
    }
}
