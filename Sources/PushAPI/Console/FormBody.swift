import Foundation
import Hummingbird
import WireFormats

/// An `application/x-www-form-urlencoded` body, as browsers send forms: every value of each
/// name, in order (a group of checkboxes sends one name several times).
struct FormBody: Sendable {
    private(set) var values: [String: [String]] = [:]

    /// Forms are small; a service-account JSON pasted into a text area is the largest, a few KiB.
    static let sizeLimit = 64 * 1024

    /// Nil when a name or value, its escapes decoded, is not UTF-8: a browser sends nothing
    /// else, and `%FF` kept as those three characters would be stored as what nobody typed.
    init?(_ body: [UInt8]) {
        for pair in body.split(separator: UInt8(ascii: "&")) {
            let parts = pair.split(separator: UInt8(ascii: "="), maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = Self.decode(parts[0]), let value = parts.count > 1 ? Self.decode(parts[1]) : "" else { return nil }
            values[name, default: []].append(value)
        }
    }

    static func read(_ request: Request) async throws -> FormBody {
        let contentType = request.headers[.contentType] ?? ""
        guard contentType.lowercased().hasPrefix("application/x-www-form-urlencoded") else {
            throw ConsoleError.badRequest("a form was expected (application/x-www-form-urlencoded)")
        }
        let buffer: ByteBuffer
        do {
            buffer = try await request.body.collect(upTo: sizeLimit)
        } catch {
            throw ConsoleError.badRequest("the form is larger than \(sizeLimit / 1024) KiB")
        }
        guard let form = FormBody(Array(buffer: buffer)) else { throw ConsoleError.badRequest(notUTF8) }
        return form
    }

    static let notUTF8 = "the form's fields must be UTF-8 text"

    /// The first value of `name`; nil when absent.
    subscript(_ name: String) -> String? {
        values[name]?.first
    }

    /// The first value of `name` with surrounding whitespace removed; nil when absent or blank.
    func trimmed(_ name: String) -> String? {
        guard let value = self[name]?.trimmingCharacters(in: .whitespacesAndNewlines), !value.isEmpty else { return nil }
        return value
    }

    /// The WHATWG URL Standard's decoding of a urlencoded name or value: `+` is a space, `%`
    /// and two hex digits a byte, any other byte itself; nil when the bytes are not UTF-8.
    private static func decode(_ bytes: ArraySlice<UInt8>) -> String? {
        var decoded: [UInt8] = []
        decoded.reserveCapacity(bytes.count)
        var index = bytes.startIndex
        while index < bytes.endIndex {
            let byte = bytes[index]
            if byte == UInt8(ascii: "%"), index + 2 < bytes.endIndex, let high = bytes[index + 1].hexDigitValue,
                let low = bytes[index + 2].hexDigitValue
            {
                decoded.append(high << 4 | low)
                index += 3
            } else {
                decoded.append(byte == UInt8(ascii: "+") ? UInt8(ascii: " ") : byte)
                index += 1
            }
        }
        return String(validating: decoded, as: UTF8.self)
    }
}
