import Foundation

/// Any JSON value, as `JSONParser` reads it and `WireJSON` writes it: an FCM message is passed
/// through to the database without the API knowing its every field. Numbers stay numbers (as
/// `Decimal`, 38 digits: no rounding through `Double`), booleans booleans.
public indirect enum JSONValue: Encodable, Sendable, Equatable {
    case null
    case bool(Bool)
    case integer(Int64)
    case number(Decimal)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .integer(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }
}

/// Reading a parsed document: each accessor is nil when the value is of another kind.
extension JSONValue {
    /// The member's value when this is an object, else nil.
    public subscript(member: String) -> JSONValue? {
        if case .object(let members) = self { return members[member] }
        return nil
    }

    public var members: [String: JSONValue]? {
        if case .object(let members) = self { return members }
        return nil
    }

    public var elements: [JSONValue]? {
        if case .array(let elements) = self { return elements }
        return nil
    }

    public var string: String? {
        if case .string(let value) = self { return value }
        return nil
    }

    public var bool: Bool? {
        if case .bool(let value) = self { return value }
        return nil
    }

    /// The value when it is a whole number that fits in `Int64`, written as one or not (`1.0`,
    /// `1e2`), as `JSONDecoder` reads an integer.
    public var integer: Int64? {
        switch self {
        case .integer(let value): value
        // A whole `Decimal` is written without a point or an exponent: `Int64` reads it exactly.
        case .number(let value): Int64(value.description)
        default: nil
        }
    }

    /// The value as a number of seconds (JWT dates are seconds since 1970, maybe fractional).
    public var seconds: Double? {
        switch self {
        case .integer(let value): Double(value)
        case .number(let value): NSDecimalNumber(decimal: value).doubleValue
        default: nil
        }
    }
}

extension StringProtocol {
    /// Holds U+0000, which JSON can carry (`\u0000`) and PostgreSQL's text and jsonb cannot:
    /// what is to be stored is refused or rewritten before the database would refuse it.
    public var holdsNUL: Bool { utf8.contains(0) }
}

extension JSONValue {
    /// The first member name or string, in sorted member order, that holds a NUL character
    /// (which PostgreSQL's jsonb and text refuse), as a path from `root`: `message.data.k`,
    /// `message.data` for a member name. Nil when there is none.
    public func pathHoldingNUL(from root: String) -> String? {
        switch self {
        case .string(let text): return text.holdsNUL ? root : nil
        case .array(let elements):
            for (index, element) in elements.enumerated() {
                if let path = element.pathHoldingNUL(from: "\(root).\(index)") { return path }
            }
            return nil
        case .object(let members):
            for name in members.keys.sorted() {
                if name.holdsNUL { return root }
                if let path = members[name]?.pathHoldingNUL(from: "\(root).\(name)") { return path }
            }
            return nil
        case .null, .bool, .integer, .number: return nil
        }
    }
}

extension [String: JSONValue] {
    /// The members that are set: one set to null is one left out, as protobuf's JSON mapping
    /// (and so FCM) reads it.
    public var setMembers: [String: JSONValue] { filter { $0.value != .null } }
}
