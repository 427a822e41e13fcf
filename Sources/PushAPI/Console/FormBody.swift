import Foundation
import Hummingbird

/// An `application/x-www-form-urlencoded` body, as browsers send forms: every value of each
/// name, in order (a group of checkboxes sends one name several times).
struct FormBody: Sendable {
    private(set) var values: [String: [String]] = [:]

    /// Forms are small; a service-account JSON pasted into a text area is the largest, a few KiB.
    static let sizeLimit = 64 * 1024

    init(_ text: String) {
        for pair in text.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = Self.decode(parts[0])
            let value = parts.count > 1 ? Self.decode(parts[1]) : ""
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
        return FormBody(String(buffer: buffer))
    }

    /// The first value of `name`; nil when absent.
    subscript(_ name: String) -> String? {
        values[name]?.first
    }

    /// The first value of `name` with surrounding whitespace removed; nil when absent or blank.
    func trimmed(_ name: String) -> String? {
        guard let value = self[name]?.trimmingCharacters(in: .whitespacesAndNewlines), !value.isEmpty else { return nil }
        return value
    }

    private static func decode(_ text: Substring) -> String {
        let spaced = text.replacingOccurrences(of: "+", with: " ")
        return spaced.removingPercentEncoding ?? spaced
    }
}
