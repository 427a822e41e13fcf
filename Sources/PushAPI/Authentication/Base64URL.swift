/// Unpadded base64url (RFC 4648 §5), the alphabet of a JWT's three segments, decoded from the
/// token's bytes directly: no string rewriting on the path of every request.
enum Base64URL {
    /// Nil for padding, a character outside the alphabet, an impossible length, or stray bits
    /// in the last character.
    static func decode(_ segment: ArraySlice<UInt8>) -> [UInt8]? {
        guard segment.count % 4 != 1 else { return nil }
        var output: [UInt8] = []
        output.reserveCapacity(segment.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits = 0
        for byte in segment {
            guard let sextet = sextet(byte) else { return nil }
            accumulator = accumulator << 6 | UInt32(sextet)
            bits += 6
            if bits >= 8 {
                bits -= 8
                output.append(UInt8(truncatingIfNeeded: accumulator >> UInt32(bits)))
                accumulator &= (1 << UInt32(bits)) - 1
            }
        }
        // What is left over must be zero bits, or two encodings would decode alike.
        guard accumulator == 0 else { return nil }
        return output
    }

    private static func sextet(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"): byte - UInt8(ascii: "A")
        case UInt8(ascii: "a")...UInt8(ascii: "z"): byte - UInt8(ascii: "a") + 26
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0") + 52
        case UInt8(ascii: "-"): 62
        case UInt8(ascii: "_"): 63
        default: nil
        }
    }
}
