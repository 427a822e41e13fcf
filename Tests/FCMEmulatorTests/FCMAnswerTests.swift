import FCMEmulator
import Foundation
import NIOCore
import Testing

/// The emulator's FCMAnswers files, read from the source tree as the worker's outcome table reads them.
enum FCMAnswerFiles {
    static let emulatorFolder = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Sources/FCMEmulator/FCMAnswers")

    static func emulators(_ name: String) throws -> FCMAnswer {
        try FCMAnswer(fileContents: Data(contentsOf: emulatorFolder.appendingPathComponent(name + ".json")))
    }

    static func emulatorFileNames() throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: emulatorFolder.path)
            .filter { $0.hasSuffix(".json") }
            .map { String($0.dropLast(".json".count)) }
            .sorted()
    }

    /// Whether two texts are the same JSON value, whatever their key order and whitespace.
    static func sameJSON(_ left: String, _ right: String) throws -> Bool {
        func normalized(_ text: String) throws -> Data {
            let value = try JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed])
            return try JSONSerialization.data(withJSONObject: value, options: [.sortedKeys, .fragmentsAllowed])
        }
        return try normalized(left) == normalized(right)
    }
}

@Suite("FCM answer files")
struct FCMAnswerTests {
    @Test("a JSON body is written compact with sorted keys; the file's headers and status are kept")
    func jsonBody() throws {
        let answer = try FCMAnswer(
            fileContents: Data(
                #"""
                {"about": "x", "status": 503, "headers": {"Retry-After": "30"},
                 "body": {"error": {"status": "UNAVAILABLE", "code": 503, "message": "a/b"}}}
                """#.utf8))
        #expect(answer.status == 503)
        #expect(answer.header("retry-after") == "30")
        #expect(String(buffer: answer.body) == #"{"error":{"code":503,"message":"a/b","status":"UNAVAILABLE"}}"#)
    }

    @Test("bodyText is the body byte for byte, empty included")
    func textBody() throws {
        let html = try FCMAnswer(fileContents: Data(#"{"status": 502, "bodyText": "<html>\n</html>"}"#.utf8))
        #expect(String(buffer: html.body) == "<html>\n</html>")
        #expect(html.headers.isEmpty)
        let empty = try FCMAnswer(fileContents: Data(#"{"status": 404, "bodyText": ""}"#.utf8))
        #expect(empty.body.readableBytes == 0)
    }

    @Test(
        "a file without a status, with both bodies or neither, or with non-string headers is refused",
        arguments: [
            #"{"body": {}}"#,
            #"{"status": 99, "body": {}}"#,
            #"{"status": 200, "body": {}, "bodyText": ""}"#,
            #"{"status": 200}"#,
            #"{"status": 200, "body": {}, "headers": {"Retry-After": 7}}"#,
            "[]",
        ]
    )
    func malformed(file: String) {
        #expect(throws: FCMAnswerFileError.self) { try FCMAnswer(fileContents: Data(file.utf8)) }
    }

    @Test("every emulator answer file reads, is a google.rpc.Status error with FCM's code, and says where it comes from")
    func emulatorFilesRead() throws {
        for name in try FCMAnswerFiles.emulatorFileNames() {
            let data = try Data(contentsOf: FCMAnswerFiles.emulatorFolder.appendingPathComponent(name + ".json"))
            let answer = try FCMAnswer(fileContents: data)
            let root = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
            #expect((root["about"] as? String)?.isEmpty == false, "\(name)")
            let body = try #require(try JSONSerialization.jsonObject(with: Data(answer.body.readableBytesView)) as? [String: Any])
            let error = try #require(body["error"] as? [String: Any], "\(name)")
            #expect(error["code"] as? Int == answer.status, "\(name)")
            #expect(error["status"] is String && error["message"] is String, "\(name)")
        }
    }
}
