import DeviceRegistry
import Foundation
import Hummingbird
import NIOCore
import NIOFoundationCompat
import WireFormats

/// JSON in and out of the API, written and read the one way the service does (`WireJSON`,
/// `JSONParser`): request bodies limited by the context's upload size and refused unless they
/// are `application/json`.
enum JSONBody {
    static func encode(_ value: some Encodable) -> ByteBuffer {
        ByteBuffer(data: WireJSON.encoded(value))
    }

    static func response(_ value: some Encodable, status: HTTPResponse.Status = .ok) -> Response {
        Response(status: status, headers: [.contentType: "application/json; charset=utf-8"], body: .init(byteBuffer: encode(value)))
    }

    /// Reads a request body that must be a JSON object with no members but `fields`; every
    /// failure is an `APIError`.
    static func object<Field>(
        from request: Request, context: some RequestContext, fields: Field.Type,
        limit: Int? = nil
    ) async throws -> JSONObject<Field> {
        let buffer = try await read(request, context: context, limit: limit)
        let value: JSONValue
        do {
            value = try buffer.withUnsafeReadableBytes { bytes throws(JSONSyntaxError) in
                try JSONParser.parse(bytes, refusingRepeatedMembers: true)
            }
        } catch let error where error.problem == .tooDeep {
            throw APIError.validation("the body nests deeper than \(JSONParser.maximumDepth) levels (at byte \(error.offset))")
        } catch let error where error.isRepeatedMember {
            // JSON, but ambiguous: which of the two was meant?
            throw APIError.validation("the body is ambiguous: \(error)")
        } catch {
            // Where and what, as the parser says it: a lone surrogate, a bad byte, a line and column.
            throw APIError.malformedJSON("the body is not valid JSON: \(error)")
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
        throw APIError.validation(
            "unknown field \(String(reflecting: unknown)); expected one of "
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
            throw APIError(
                .badRequest, code: "MALFORMED_BODY", "the body could not be read: it was cut short or its chunked encoding is malformed")
        }
        return body
    }
}

/// The members a request body may have, one case each, spelt as on the wire.
protocol BodyField: CaseIterable, RawRepresentable<String> {}

/// A request body's members. Each reader answers absent and null alike with nil (or, for a
/// required member, "is required"), and any other kind of value with a refusal naming the member.
struct JSONObject<Field: BodyField> {
    let members: [String: JSONValue]

    init(members: [String: JSONValue]) throws(APIError) {
        try JSONBody.refuseUnknownMembers(members.keys, of: Field.self)
        self.members = members
    }

    /// The member, whatever its kind; null is a value here.
    func required(_ field: Field) throws(APIError) -> JSONValue {
        guard let value = members[field.rawValue] else { throw APIError.validation("\(field.rawValue) is required") }
        return value
    }

    /// A string PostgreSQL can hold: a NUL is refused here, naming the member, not by the
    /// database in its own words.
    func string(_ field: Field) throws(APIError) -> String? {
        let text = try read(field, as: "a string") { $0.string }
        if text?.holdsNUL == true { throw APIError.holdsNUL(field.rawValue) }
        return text
    }

    func bool(_ field: Field) throws(APIError) -> Bool? {
        try read(field, as: "a boolean") { $0.bool }
    }

    func integer(_ field: Field) throws(APIError) -> Int64? {
        try read(field, as: "an integer") { $0.integer }
    }

    func integers(_ field: Field) throws(APIError) -> [Int64]? {
        try elements(field, as: "an integer") { $0.integer }
    }

    func strings(_ field: Field) throws(APIError) -> [String]? {
        let texts = try elements(field, as: "a string") { $0.string }
        if let index = texts?.firstIndex(where: \.holdsNUL) { throw APIError.holdsNUL("\(field.rawValue).\(index)") }
        return texts
    }

    private func read<Value>(_ field: Field, as kind: String, _ value: (JSONValue) -> Value?) throws(APIError) -> Value? {
        guard let member = members[field.rawValue], member != .null else { return nil }
        guard let read = value(member) else { throw APIError.validation("\(field.rawValue) must be \(kind)") }
        return read
    }

    /// An array whose every element is `kind`; a refusal names the element (`userIds.3`).
    private func elements<Element>(_ field: Field, as kind: String, _ element: (JSONValue) -> Element?) throws(APIError) -> [Element]? {
        guard let array = try read(field, as: "an array", \.elements) else { return nil }
        var read: [Element] = []
        read.reserveCapacity(array.count)
        for (index, value) in array.enumerated() {
            guard let value = element(value) else { throw APIError.validation("\(field.rawValue).\(index) must be \(kind)") }
            read.append(value)
        }
        return read
    }
}
