import Foundation

/// Unpadded base64url (RFC 4648 §5), the alphabet of compact JWS segments.
enum Base64URL {
    static func encode(_ bytes: some Sequence<UInt8>) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// Strict: padding and characters outside the url-safe alphabet make the segment invalid, as Google's
    /// token endpoint treats them.
    static func decode(_ segment: Substring) -> Data? {
        guard segment.utf8.count % 4 != 1 else { return nil }
        var standard = ""
        standard.reserveCapacity(segment.utf8.count + 3)
        for character in segment.unicodeScalars {
            switch character {
            case "A"..."Z", "a"..."z", "0"..."9": standard.unicodeScalars.append(character)
            case "-": standard.append("+")
            case "_": standard.append("/")
            default: return nil
            }
        }
        standard.append(String(repeating: "=", count: (4 - standard.utf8.count % 4) % 4))
        return Data(base64Encoded: standard)
    }
}
