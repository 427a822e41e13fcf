import Foundation
import Testing

@testable import PushAPI

@Suite("Console upload forms")
struct ConsoleUploadFormTests {
    static func parse(_ text: String, boundary: String = "XyZ") -> UploadForm? {
        UploadForm(multipart: Array(text.utf8), boundary: boundary)
    }

    @Test func fieldsAndFilesAreReadByName() throws {
        let body = """
            preamble to ignore\r
            --XyZ\r
            Content-Disposition: form-data; name="csrf"\r
            \r
            token-1\r
            --XyZ  \r
            content-disposition: form-data; name="serviceAccountFile"; filename="key \\"prod\\".json"\r
            Content-Type: application/json\r
            \r
            {"a":"line one\r
            -- --XyZ not at a line's start"}\r
            --XyZ\r
            Content-Disposition: form-data; name="tag"\r
            \r
            one\r
            --XyZ\r
            Content-Disposition: form-data; name="tag"\r
            \r
            \r
            --XyZ--\r
            epilogue
            """
        let form = try #require(Self.parse(body))
        #expect(form["csrf"] == "token-1")
        #expect(form.fields["tag"] == ["one", ""])
        let file = try #require(form.files["serviceAccountFile"])
        #expect(file.filename == #"key "prod".json"#)
        #expect(String(decoding: file.content, as: UTF8.self) == "{\"a\":\"line one\r\n-- --XyZ not at a line's start\"}")
    }

    @Test func aBodyWithoutItsShapeIsRefused() {
        #expect(Self.parse("no boundary at all") == nil)
        #expect(Self.parse("--XyZ\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nunterminated") == nil)
        #expect(Self.parse("--XyZ\r\nContent-Type: text/plain\r\n\r\nno name\r\n--XyZ--") == nil)
        #expect(Self.parse("--XyZ\r\nContent-Disposition: attachment; name=\"a\"\r\n\r\nx\r\n--XyZ--") == nil)
        #expect(Self.parse("--XyZ--\r\n")?.fields.isEmpty == true, "an empty form")
    }

    @Test func theBoundaryIsReadQuotedOrNot() {
        #expect(UploadForm.boundary(of: "multipart/form-data; boundary=----WebKitFormBoundaryAbc") == "----WebKitFormBoundaryAbc")
        #expect(UploadForm.boundary(of: #"multipart/form-data; charset=utf-8; Boundary="a b""#) == "a b")
        #expect(UploadForm.boundary(of: "multipart/form-data") == nil)
        #expect(UploadForm.boundary(of: "multipart/form-data; boundary=" + String(repeating: "x", count: 71)) == nil)
    }
}
