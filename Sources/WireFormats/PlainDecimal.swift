extension Int64 {
    /// An integer written as plain decimal digits, as ids travel in paths, query strings and
    /// claims: an optional `-`, then `0` or digits that do not start with `0`. `Int64("+42")`
    /// and `Int64("0042")` both read 42: one id had several spellings.
    public init?(plainDecimal text: some StringProtocol) {
        let bytes = Array(text.utf8)
        let digits = bytes.first == UInt8(ascii: "-") ? bytes.dropFirst() : bytes[...]
        guard let first = digits.first, digits.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }),
            first != UInt8(ascii: "0") || digits.count == 1, let value = Int64(String(text))
        else { return nil }
        self = value
    }
}
