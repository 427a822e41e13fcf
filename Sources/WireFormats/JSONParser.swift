import Foundation

/// Why a document is not JSON: what was wrong, and where reading stopped.
public struct JSONSyntaxError: Error, Equatable, CustomStringConvertible {
    public enum Problem: Equatable, Sendable {
        /// The document stops inside a value, or holds none.
        case endsEarly
        /// A byte no JSON document can have at that place.
        case unexpected(UInt8)
        /// A string whose bytes are not UTF-8, or that escapes half a surrogate pair.
        case invalidString
        /// Arrays and objects nested deeper than `JSONParser.maximumDepth`.
        case tooDeep
        /// A number too large for a `Decimal`.
        case numberOutOfRange
        /// A number with more significant digits than a `Decimal` keeps: it would be rounded.
        case numberTooPrecise
        /// A member name given twice in one object, where repeats are refused.
        case repeatedMember(String)
    }

    public let problem: Problem

    public var isRepeatedMember: Bool {
        if case .repeatedMember = problem { true } else { false }
    }
    /// The byte offset where reading stopped.
    public let offset: Int
    /// The line (from 1) and the character in that line (from 1) of `offset`.
    public let line: Int
    public let column: Int

    /// `bytes` is the whole document: the line and column are counted in it.
    init(_ problem: Problem, at offset: Int, in bytes: UnsafeRawBufferPointer) {
        self.problem = problem
        self.offset = offset
        var (line, column) = (1, 1)
        for byte in bytes[..<min(offset, bytes.count)] {
            if byte == UInt8(ascii: "\n") {
                (line, column) = (line + 1, 1)
            } else if byte & 0xC0 != 0x80 {
                // Not a UTF-8 continuation byte: a character starts here.
                column += 1
            }
        }
        (self.line, self.column) = (line, column)
    }

    public var description: String {
        let place = "line \(line), column \(column)"
        return switch problem {
        case .endsEarly: "it ends too early, at \(place)"
        case .unexpected(let byte): "unexpected \(Self.name(byte)) at \(place)"
        case .invalidString: "invalid UTF-8 or a lone surrogate in the string at \(place)"
        case .tooDeep: "more than \(JSONParser.maximumDepth) nested arrays and objects at \(place)"
        case .numberOutOfRange: "a number out of range at \(place)"
        case .repeatedMember(let name): "the member \"\(name)\" given twice, at \(place)"
        case .numberTooPrecise:
            "a number with more than \(JSONParser.mostSignificantDigits) significant digits at \(place) (send it as a string)"
        }
    }

    /// A byte as a message can show it: visible ASCII quoted, anything else (a control
    /// character, part of a multi-byte character) by its value.
    private static func name(_ byte: UInt8) -> String {
        switch byte {
        case 0x21...0x7E: "'\(Character(Unicode.Scalar(byte)))'"
        case 0x20: "a space"
        case ..<0x20, 0x7F: "control character 0x\(String(byte, radix: 16, uppercase: true))"
        default: "byte 0x\(String(byte, radix: 16, uppercase: true))"
        }
    }
}

/// A strict RFC 8259 reader: the one way the service reads JSON (request bodies, JWTs, FCM's
/// and Google's answers, service-account files, pushctl's options, the emulator's requests).
/// Strict, because what it accepts is stored as jsonb and sent on to FCM.
///
/// Invalid UTF-8, unescaped control characters, lone surrogates, leading zeros, trailing commas
/// or content after the value are errors. A repeated member name keeps its last value, as jsonb
/// does, unless `refusingRepeatedMembers`: what a client sends (a request body, a message typed
/// for pushctl or the console) says one thing per member, or is refused.
public struct JSONParser {
    /// Deeper documents are refused, here and for every request body (JSONBody): FCM's messages
    /// nest a handful of levels, and a deep document costs stack and decoding time.
    public static let maximumDepth = 32

    public static func parse(_ bytes: UnsafeRawBufferPointer, refusingRepeatedMembers: Bool = false) throws(JSONSyntaxError)
        -> JSONValue
    {
        var parser = JSONParser(bytes: bytes, refusesRepeatedMembers: refusingRepeatedMembers)
        parser.skipWhitespace()
        let value = try parser.value(depth: 0)
        parser.skipWhitespace()
        guard parser.index == bytes.count else { throw parser.failure() }
        return value
    }

    public static func parse(_ bytes: some ContiguousBytes, refusingRepeatedMembers: Bool = false) throws(JSONSyntaxError)
        -> JSONValue
    {
        let result = bytes.withUnsafeBytes { buffer in
            Result { () throws(JSONSyntaxError) in try parse(buffer, refusingRepeatedMembers: refusingRepeatedMembers) }
        }
        return try result.get()
    }

    private let bytes: UnsafeRawBufferPointer
    private let refusesRepeatedMembers: Bool
    private var index = 0

    private init(bytes: UnsafeRawBufferPointer, refusesRepeatedMembers: Bool) {
        self.bytes = bytes
        self.refusesRepeatedMembers = refusesRepeatedMembers
    }

    private var current: UInt8? { index < bytes.count ? bytes[index] : nil }

    /// What stops reading at `offset` (by default where reading is): the byte there, or the end.
    private func failure(_ problem: JSONSyntaxError.Problem? = nil, at offset: Int? = nil) -> JSONSyntaxError {
        let offset = offset ?? index
        return JSONSyntaxError(problem ?? (offset < bytes.count ? .unexpected(bytes[offset]) : .endsEarly), at: offset, in: bytes)
    }

    private mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    private mutating func value(depth: Int) throws(JSONSyntaxError) -> JSONValue {
        guard let byte = current else { throw failure() }
        switch byte {
        case UInt8(ascii: "{"): return try object(depth: depth + 1)
        case UInt8(ascii: "["): return try array(depth: depth + 1)
        case UInt8(ascii: "\""): return .string(try string())
        case UInt8(ascii: "t"):
            try literal("true")
            return .bool(true)
        case UInt8(ascii: "f"):
            try literal("false")
            return .bool(false)
        case UInt8(ascii: "n"):
            try literal("null")
            return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try number()
        default: throw failure()
        }
    }

    private mutating func literal(_ word: StaticString) throws(JSONSyntaxError) {
        let count = word.utf8CodeUnitCount
        guard bytes.count - index >= count,
            memcmp(bytes.baseAddress! + index, word.utf8Start, count) == 0
        else {
            // Point at the first byte that differs (`tru}` at the `}`), not at the word's start.
            let letters = UnsafeRawBufferPointer(start: word.utf8Start, count: count)
            var offset = index
            while offset < bytes.count, offset - index < count, bytes[offset] == letters[offset - index] { offset += 1 }
            throw failure(at: offset)
        }
        index += count
    }

    private mutating func object(depth: Int) throws(JSONSyntaxError) -> JSONValue {
        guard depth <= Self.maximumDepth else { throw failure(.tooDeep) }
        index += 1
        var members: [String: JSONValue] = [:]
        skipWhitespace()
        if current == UInt8(ascii: "}") {
            index += 1
            return .object(members)
        }
        while true {
            guard current == UInt8(ascii: "\"") else { throw failure() }
            let start = index
            let name = try string()
            if refusesRepeatedMembers && members[name] != nil { throw failure(.repeatedMember(name), at: start) }
            skipWhitespace()
            guard current == UInt8(ascii: ":") else { throw failure() }
            index += 1
            skipWhitespace()
            members[name] = try value(depth: depth)
            if try closes(UInt8(ascii: "}")) { return .object(members) }
        }
    }

    private mutating func array(depth: Int) throws(JSONSyntaxError) -> JSONValue {
        guard depth <= Self.maximumDepth else { throw failure(.tooDeep) }
        index += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if current == UInt8(ascii: "]") {
            index += 1
            return .array(elements)
        }
        while true {
            elements.append(try value(depth: depth))
            if try closes(UInt8(ascii: "]")) { return .array(elements) }
        }
    }

    /// After a member or element: true at the container's closing bracket, false after a comma.
    private mutating func closes(_ bracket: UInt8) throws(JSONSyntaxError) -> Bool {
        skipWhitespace()
        switch current {
        case UInt8(ascii: ","):
            index += 1
            skipWhitespace()
            return false
        case bracket:
            index += 1
            return true
        default:
            throw failure()
        }
    }

    /// Reads a string starting at its opening quote. Runs without escapes are copied as they are;
    /// the UTF-8 of the whole result is validated once.
    private mutating func string() throws(JSONSyntaxError) -> String {
        index += 1
        let start = index
        // The common case: no escapes, so the bytes between the quotes are the string.
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                let run = UnsafeRawBufferPointer(rebasing: bytes[start..<index])
                index += 1
                guard let text = String(validating: run, as: UTF8.self) else { throw failure(.invalidString, at: start) }
                return text
            }
            if byte == UInt8(ascii: "\\") { break }
            guard byte >= 0x20 else { throw failure() }
            index += 1
        }
        var utf8 = Array(UnsafeRawBufferPointer(rebasing: bytes[start..<index]))
        while let byte = current {
            switch byte {
            case UInt8(ascii: "\""):
                index += 1
                guard let text = String(validating: utf8, as: UTF8.self) else { throw failure(.invalidString, at: start) }
                return text
            case UInt8(ascii: "\\"):
                index += 1
                try escape(into: &utf8)
            case ..<0x20:
                throw failure()
            default:
                utf8.append(byte)
                index += 1
            }
        }
        throw failure()
    }

    private mutating func escape(into utf8: inout [UInt8]) throws(JSONSyntaxError) {
        guard let byte = current else { throw failure() }
        let escaped = index
        index += 1
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): utf8.append(byte)
        case UInt8(ascii: "b"): utf8.append(0x08)
        case UInt8(ascii: "f"): utf8.append(0x0C)
        case UInt8(ascii: "n"): utf8.append(0x0A)
        case UInt8(ascii: "r"): utf8.append(0x0D)
        case UInt8(ascii: "t"): utf8.append(0x09)
        case UInt8(ascii: "u"):
            var scalar = UInt32(try hex4())
            if (0xD800...0xDBFF).contains(scalar) {
                // A high surrogate must be followed by an escaped low one.
                guard current == UInt8(ascii: "\\"), index + 1 < bytes.count, bytes[index + 1] == UInt8(ascii: "u") else {
                    throw failure(.invalidString, at: escaped - 1)
                }
                index += 2
                let low = UInt32(try hex4())
                guard (0xDC00...0xDFFF).contains(low) else { throw failure(.invalidString, at: escaped - 1) }
                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
            }
            guard let unicode = Unicode.Scalar(scalar) else { throw failure(.invalidString, at: escaped - 1) }
            utf8.append(contentsOf: UTF8.encode(unicode)!)
        default:
            throw failure(at: escaped)
        }
    }

    private mutating func hex4() throws(JSONSyntaxError) -> UInt16 {
        var value: UInt16 = 0
        for _ in 0..<4 {
            guard let digit = current?.hexDigitValue else { throw failure() }
            value = value << 4 | UInt16(digit)
            index += 1
        }
        return value
    }

    /// An integer that fits in `Int64` stays exact; any other number becomes a `Decimal`.
    private mutating func number() throws(JSONSyntaxError) -> JSONValue {
        let start = index
        if current == UInt8(ascii: "-") { index += 1 }
        if current == UInt8(ascii: "0") {
            index += 1
        } else {
            guard digits() > 0 else { throw failure() }
        }
        var integral = true
        if current == UInt8(ascii: ".") {
            index += 1
            guard digits() > 0 else { throw failure() }
            integral = false
        }
        if current == UInt8(ascii: "e") || current == UInt8(ascii: "E") {
            index += 1
            if current == UInt8(ascii: "+") || current == UInt8(ascii: "-") { index += 1 }
            guard digits() > 0 else { throw failure() }
            integral = false
        }
        let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        if integral, let integer = Int64(text) { return .integer(integer) }
        // Decimal(string:) rounds what it cannot hold: a message would change on its way.
        guard Self.significantDigits(of: text) <= Self.mostSignificantDigits else { throw failure(.numberTooPrecise, at: start) }
        guard let decimal = Decimal(string: text, locale: nil), decimal.isFinite else { throw failure(.numberOutOfRange, at: start) }
        return .number(decimal)
    }

    /// The significant digits a `Decimal` keeps exactly.
    public static let mostSignificantDigits = 38

    /// The digits of a JSON number's mantissa, from its first non-zero digit to its last.
    static func significantDigits(of number: String) -> Int {
        let mantissa = number.utf8.prefix { $0 != UInt8(ascii: "e") && $0 != UInt8(ascii: "E") }
        let digits = mantissa.filter { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }
        guard let first = digits.firstIndex(where: { $0 != UInt8(ascii: "0") }),
            let last = digits.lastIndex(where: { $0 != UInt8(ascii: "0") })
        else { return 0 }
        return last - first + 1
    }

    private mutating func digits() -> Int {
        let start = index
        while let byte = current, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) { index += 1 }
        return index - start
    }
}
