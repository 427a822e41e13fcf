import Hummingbird

extension Request {
    /// The token of an `Authorization: Bearer …` header; nil when absent, empty or another scheme.
    var bearerToken: String? {
        guard let authorization = headers[.authorization] else { return nil }
        let parts = authorization.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        // HTTP's whitespace (space, tab) trimmed on the UTF-8 view: Foundation's trimming is a
        // measurable share of a registration's CPU.
        let value = parts[1]
        let isBlank = { (byte: UInt8) in byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t") }
        guard let first = value.utf8.firstIndex(where: { !isBlank($0) }),
            let last = value.utf8.lastIndex(where: { !isBlank($0) })
        else { return nil }
        return String(value[first...last])
    }
}
