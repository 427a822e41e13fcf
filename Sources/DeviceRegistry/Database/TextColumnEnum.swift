import PostgresNIO

/// A closed set of states stored in a `text` column, spelt in Swift as in the database.
/// Bound as text; read back as one of its cases, and a value outside them (a schema newer than
/// this program, a row written by hand) fails the row's decoding rather than turning into some
/// other case. Interpolated as its raw value, so messages and logs spell it as the database does.
public protocol TextColumnEnum: RawRepresentable<String>, CaseIterable, Sendable, CustomStringConvertible,
    PostgresDecodable, PostgresNonThrowingEncodable, PostgresArrayEncodable
{}

extension TextColumnEnum {
    public var description: String { rawValue }

    /// The cases as the database spells them, for messages: `ios, android, web`.
    public static var choiceList: String { allCases.map(\.rawValue).joined(separator: ", ") }

    public static var psqlType: PostgresDataType { .text }
    public static var psqlFormat: PostgresFormat { .binary }
    public static var psqlArrayType: PostgresDataType { .textArray }

    public func encode<JSONEncoder: PostgresJSONEncoder>(into byteBuffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        rawValue.encode(into: &byteBuffer, context: context)
    }

    public init<JSONDecoder: PostgresJSONDecoder>(
        from buffer: inout ByteBuffer, type: PostgresDataType, format: PostgresFormat,
        context: PostgresDecodingContext<JSONDecoder>
    ) throws {
        guard let value = Self(rawValue: try String(from: &buffer, type: type, format: format, context: context)) else {
            throw PostgresDecodingError.Code.failure
        }
        self = value
    }
}
