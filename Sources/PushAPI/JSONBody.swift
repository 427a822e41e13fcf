import DeviceRegistry
import Foundation
import Hummingbird
import NIOCore
import NIOFoundationCompat
import WireFormats

/// JSON in and out of the API: dates as ISO 8601 UTC with milliseconds, request bodies limited
/// by the context's upload size and refused unless they are `application/json`.
enum JSONBody {
    static func encode(_ value: some Encodable) -> ByteBuffer {
        // Encoding our own response types cannot fail.
        ByteBuffer(data: try! encoder.encode(value))
    }

    static func response(_ value: some Encodable, status: HTTPResponse.Status = .ok) -> Response {
        response(encode(value), status: status)
    }

    /// A response whose JSON is already written.
    static func response(_ json: ByteBuffer, status: HTTPResponse.Status = .ok) -> Response {
        Response(status: status, headers: [.contentType: "application/json; charset=utf-8"], body: .init(byteBuffer: json))
    }

    /// Reads and decodes a JSON request body; every failure is an `APIError`.
    static func decode<T: Decodable>(_ type: T.Type, from request: Request, context: some RequestContext,
                                     limit: Int? = nil) async throws -> T {
        let buffer = try await read(request, context: context, limit: limit)
        do {
            return try JSONDecoder().decode(T.self, from: buffer)
        } catch let error as APIError {
            throw error
        } catch let error as DecodingError {
            throw describe(error)
        } catch {
            throw APIError.malformedJSON("the body is not valid JSON")
        }
    }

    /// Reads a request body that must be a JSON object with no members but `fields`, for handlers
    /// that pick its members themselves (the registration: no `Decodable` machinery on the busiest path).
    static func object<Field>(from request: Request, context: some RequestContext,
                              fields: Field.Type) async throws -> JSONObject<Field> {
        let buffer = try await read(request, context: context, limit: nil)
        let value: JSONValue
        do {
            value = try buffer.withUnsafeReadableBytes { bytes throws(JSONSyntaxError) in try JSONParser.parse(bytes) }
        } catch {
            throw APIError.malformedJSON("the body is not valid JSON")
        }
        guard case .object(let members) = value else { throw APIError.validation("the body must be a JSON object") }
        return try JSONObject(members: members)
    }

    /// Refuses a member the endpoint does not read: a misspelt field (`deviceID`, `userIDs`) must
    /// not be dropped silently and with it what it was meant to do. Names the first unknown
    /// member in sorted order, so the answer does not depend on how the body was hashed.
    static func refuseUnknownMembers<Field: BodyField>(_ names: some Sequence<String>, of _: Field.Type) throws(APIError) {
        var unknown: String?
        for name in names where Field(rawValue: name) == nil {
            unknown = min(unknown ?? name, name)
        }
        guard let unknown else { return }
        throw APIError.validation("unknown field \(String(reflecting: unknown)); expected one of "
            + Field.allCases.map(\.rawValue).joined(separator: ", "))
    }

    /// The body, after checking its media type and size.
    private static func read(_ request: Request, context: some RequestContext, limit: Int?) async throws -> ByteBuffer {
        let limit = limit ?? context.maxUploadSize
        guard let contentType = request.headers[.contentType],
              let mediaType = MediaType(from: contentType), mediaType.isType(.applicationJson)
        else {
            throw APIError(.unsupportedMediaType, code: "UNSUPPORTED_MEDIA_TYPE", "the body must be application/json")
        }
        let body: ByteBuffer
        do {
            body = try await request.body.collect(upTo: limit)
        } catch is NIOTooManyBytesError {
            throw APIError(.contentTooLarge, code: "PAYLOAD_TOO_LARGE", "the body must be at most \(limit) bytes")
        } catch {
            // A malformed chunked body, or a client gone mid-body: the client's doing, not ours.
            throw APIError(.badRequest, code: "MALFORMED_BODY", "the body could not be read: it was cut short or its chunked encoding is malformed")
        }
        if let depth = JSONBodyNesting.offsetBeyond(JSONParser.maximumDepth, in: body) {
            throw APIError.validation("the body nests deeper than \(JSONParser.maximumDepth) levels (at byte \(depth))")
        }
        return body
    }

    private static func describe(_ error: DecodingError) -> APIError {
        func field(_ path: [any CodingKey]) -> String {
            path.map { $0.intValue.map(String.init) ?? $0.stringValue }.joined(separator: ".")
        }
        switch error {
        case .typeMismatch(let type, let context) where !context.codingPath.isEmpty:
            return .validation("\(field(context.codingPath)) must be \(typeName(type))")
        case .valueNotFound(let type, let context) where !context.codingPath.isEmpty:
            return .validation("\(field(context.codingPath)) must be \(typeName(type))")
        case .typeMismatch, .valueNotFound:
            return .validation("the body must be a JSON object")
        case .keyNotFound(let key, _):
            return .validation("\(key.stringValue) is required")
        case .dataCorrupted:
            return .malformedJSON("the body is not valid JSON")
        @unknown default:
            return .malformedJSON("the body is not valid JSON")
        }
    }

    private static func typeName(_ type: Any.Type) -> String {
        switch type {
        case is String.Type, is String?.Type: "a string"
        case is Bool.Type: "a boolean"
        case is Int.Type, is Int64.Type: "an integer"
        case is [Int64].Type, is [String].Type: "an array"
        default: "of another type"
        }
    }

    private static let encoder = WireJSON.makeEncoder()
}

/// The members a request body may have, one case each, spelt as on the wire.
protocol BodyField: CaseIterable, RawRepresentable<String> {}

/// A request body's members, read with the same messages `decode` gives for a `Decodable` type.
struct JSONObject<Field: BodyField> {
    let members: [String: JSONValue]

    init(members: [String: JSONValue]) throws(APIError) {
        try JSONBody.refuseUnknownMembers(members.keys, of: Field.self)
        self.members = members
    }

    /// The member as a string; nil when it is absent or null.
    func string(_ field: Field) throws(APIError) -> String? {
        switch members[field.rawValue] {
        case nil, .null?: return nil
        case .string(let value)?: return value
        default: throw APIError.validation("\(field.rawValue) must be a string")
        }
    }
}

/// How deep a body nests, found in one pass before any decoder reads it.
enum JSONBodyNesting {
    /// The offset where `body` opens its `limit + 1`th nested array or object, if it does: one
    /// pass over the bytes before any decoder sees them, since decoding deep documents costs
    /// more than linear time (a 3 KB message nested 510 levels took 1.4 s of event-loop CPU).
    static func offsetBeyond(_ limit: Int, in body: ByteBuffer) -> Int? {
        body.withUnsafeReadableBytes { bytes -> Int? in
            var depth = 0, inString = false, escaped = false
            for (offset, byte) in bytes.enumerated() {
                if inString {
                    if escaped { escaped = false } else if byte == UInt8(ascii: "\\") { escaped = true } else if byte == UInt8(ascii: "\"") { inString = false }
                    continue
                }
                switch byte {
                case UInt8(ascii: "\""): inString = true
                case UInt8(ascii: "{"), UInt8(ascii: "["):
                    depth += 1
                    if depth > limit { return offset }
                case UInt8(ascii: "}"), UInt8(ascii: "]"): depth -= 1
                default: break
                }
            }
            return nil
        }
    }
}
