import Foundation
import Hummingbird

/// A form that may carry a file: `multipart/form-data` (RFC 7578), as a browser sends a form
/// with `enctype="multipart/form-data"`, or a plain urlencoded form (`FormBody`). Text fields
/// and files by name; the whole body is held, so it is read up to `FormBody.sizeLimit`.
struct UploadForm: Sendable {
    struct File: Sendable, Equatable {
        /// As the browser named it; empty when the file input was left empty.
        let filename: String
        let content: Data
    }

    private(set) var fields: [String: [String]] = [:]
    private(set) var files: [String: File] = [:]

    static func read(_ request: Request) async throws -> UploadForm {
        let contentType = request.headers[.contentType] ?? ""
        let buffer: ByteBuffer
        do {
            buffer = try await request.body.collect(upTo: FormBody.sizeLimit)
        } catch {
            throw ConsoleError.badRequest("the form is larger than \(FormBody.sizeLimit / 1024) KiB")
        }
        if contentType.lowercased().hasPrefix("application/x-www-form-urlencoded") {
            guard let form = FormBody(Array(buffer: buffer)) else { throw ConsoleError.badRequest(FormBody.notUTF8) }
            return UploadForm(fields: form.values)
        }
        guard contentType.lowercased().hasPrefix("multipart/form-data"), let boundary = boundary(of: contentType) else {
            throw ConsoleError.badRequest("a form was expected (multipart/form-data or application/x-www-form-urlencoded)")
        }
        guard let form = UploadForm(multipart: Array(buffer: buffer), boundary: boundary) else {
            throw ConsoleError.badRequest("the form's multipart body is malformed, or a field of it is not UTF-8 text")
        }
        return form
    }

    init(fields: [String: [String]] = [:], files: [String: File] = [:]) {
        self.fields = fields
        self.files = files
    }

    /// The first value of the text field `name`; nil when absent.
    subscript(_ name: String) -> String? {
        fields[name]?.first
    }

    /// The first value of `name` with surrounding whitespace removed; nil when absent or blank.
    func trimmed(_ name: String) -> String? {
        guard let value = self[name]?.trimmingCharacters(in: .whitespacesAndNewlines), !value.isEmpty else { return nil }
        return value
    }

    /// The `boundary` parameter of a multipart content type, quoted or not.
    static func boundary(of contentType: String) -> String? {
        for parameter in contentType.split(separator: ";").dropFirst() {
            let pair = parameter.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard pair.count == 2, pair[0].lowercased() == "boundary" else { continue }
            let value =
                pair[1].count >= 2 && pair[1].hasPrefix("\"") && pair[1].hasSuffix("\"") ? String(pair[1].dropFirst().dropLast()) : pair[1]
            // RFC 2046: 1 to 70 characters.
            return (1...70).contains(value.utf8.count) ? value : nil
        }
        return nil
    }

    /// Parts are `--boundary CRLF headers CRLF CRLF content` up to the next `CRLF --boundary`,
    /// the last boundary followed by `--`. Nil for a body that does not follow that shape, or
    /// with a text field that is not UTF-8 (a file's content is taken as it is).
    init?(multipart body: [UInt8], boundary: String) {
        // The CRLF before the first boundary is optional (no preamble): supply one, so every
        // delimiter is the same `CRLF --boundary`.
        let bytes = Array("\r\n".utf8) + body
        let delimiter = Array("\r\n--\(boundary)".utf8)
        guard var position = Self.find(delimiter, in: bytes, from: 0) else { return nil }
        position += delimiter.count
        while true {
            if bytes[position...].starts(with: Array("--".utf8)) { return }
            // Transport padding (spaces or tabs) may follow a delimiter before its CRLF.
            while position < bytes.count, bytes[position] == 0x20 || bytes[position] == 0x09 { position += 1 }
            guard bytes[position...].starts(with: Array("\r\n".utf8)) else { return nil }
            position += 2
            guard let headersEnd = Self.find(Array("\r\n\r\n".utf8), in: bytes, from: position) else { return nil }
            let headers = String(decoding: bytes[position..<headersEnd], as: UTF8.self)
            let contentStart = headersEnd + 4
            guard let contentEnd = Self.find(delimiter, in: bytes, from: contentStart) else { return nil }
            guard let disposition = Self.disposition(headers), let name = disposition["name"] else { return nil }
            let content = bytes[contentStart..<contentEnd]
            if let filename = disposition["filename"] {
                if files[name] == nil { files[name] = File(filename: filename, content: Data(content)) }
            } else {
                guard let text = String(validating: content, as: UTF8.self) else { return nil }
                fields[name, default: []].append(text)
            }
            position = contentEnd + delimiter.count
        }
    }

    /// The parameters of a part's `Content-Disposition: form-data; name="…"; filename="…"`.
    private static func disposition(_ headers: String) -> [String: String]? {
        for line in headers.split(separator: "\r\n") {
            guard let colon = line.firstIndex(of: ":"),
                line[..<colon].trimmingCharacters(in: .whitespaces).lowercased() == "content-disposition"
            else { continue }
            var parameters: [String: String] = [:]
            var rest = Substring(line[line.index(after: colon)...])
            guard let type = rest.split(separator: ";", maxSplits: 1).first,
                type.trimmingCharacters(in: .whitespaces).lowercased() == "form-data"
            else { return nil }
            rest = rest.drop { $0 != ";" }
            while let semicolon = rest.firstIndex(of: ";") {
                rest = rest[rest.index(after: semicolon)...].drop { $0 == " " || $0 == "\t" }
                guard let equals = rest.firstIndex(of: "=") else { break }
                let key = rest[..<equals].trimmingCharacters(in: .whitespaces).lowercased()
                rest = rest[rest.index(after: equals)...]
                var value = ""
                if rest.first == "\"" {
                    // A quoted string: browsers percent-encode a quote in a name, but a backslash escape is legal.
                    rest = rest.dropFirst()
                    var escaped = false
                    while let character = rest.first {
                        rest = rest.dropFirst()
                        if escaped {
                            value.append(character)
                            escaped = false
                        } else if character == "\\" {
                            escaped = true
                        } else if character == "\"" {
                            break
                        } else {
                            value.append(character)
                        }
                    }
                } else {
                    value = String(rest.prefix { $0 != ";" }).trimmingCharacters(in: .whitespaces)
                }
                rest = rest.drop { $0 != ";" }
                parameters[key] = value
            }
            return parameters
        }
        return nil
    }

    private static func find(_ needle: [UInt8], in haystack: [UInt8], from start: Int) -> Int? {
        guard let first = needle.first, haystack.count >= needle.count else { return nil }
        var index = start
        while index <= haystack.count - needle.count {
            if haystack[index] == first, haystack[index..<(index + needle.count)].elementsEqual(needle) { return index }
            index += 1
        }
        return nil
    }
}
