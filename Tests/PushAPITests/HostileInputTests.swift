import DeviceRegistry
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import TestSupport
import Testing
import WireFormats

@testable import PushAPI

/// What an attacker can send that the in-process client cannot: broken bodies on a real socket,
/// documents nested to cost decoding time; and what every answer must carry.
@Suite("push-api against hostile requests")
struct HostileInputTests {
    /// A malformed chunked body or a client gone mid-body is the client's doing: a 400 envelope
    /// or a closed connection, never a 500, and nothing logged at error level.
    @Test func brokenBodiesAreNeverA500() async throws {
        let fixture = try await APIFixture.make()
        let log = CapturedLog()
        try await fixture.test(.live, logger: log.logger(level: .info)) { client in
            let port = try #require(client.port)
            let head =
                "POST /push/devices HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer \(fixture.token())\r\nContent-Type: application/json\r\n"
            let malformedChunks = try RawHTTP.exchange(port: port, head + "Transfer-Encoding: chunked\r\n\r\nzz\r\n{\"token\"\r\n0\r\n\r\n")
            #expect(!malformedChunks.hasPrefix("HTTP/1.1 5"), "\(malformedChunks)")
            #expect(malformedChunks.isEmpty || malformedChunks.hasPrefix("HTTP/1.1 400"), "\(malformedChunks)")
            let cutShort = try RawHTTP.exchange(port: port, head + "Content-Length: 200\r\n\r\n{\"token\":\"abc", halfClose: true)
            #expect(!cutShort.hasPrefix("HTTP/1.1 5"), "\(cutShort)")
            let truncatedChunk = try RawHTTP.exchange(
                port: port, head + "Transfer-Encoding: chunked\r\n\r\n40\r\n{\"token\":", halfClose: true)
            #expect(!truncatedChunk.hasPrefix("HTTP/1.1 5"), "\(truncatedChunk)")
            // The server is none the worse.
            let health = try await client.execute(uri: "/healthz", method: .get)
            #expect(health.status == .ok)
        }
        let errors = log.lines.filter { $0.hasPrefix("error") || $0.hasPrefix("critical") }
        #expect(errors.isEmpty, "\(errors)")
    }

    /// Every body is refused past 32 levels of nesting, where the parser meets the 33rd, with a
    /// clear 400; FCM's messages nest a handful of levels.
    @Test func deeplyNestedBodiesAreRefusedBeforeDecoding() async throws {
        let fixture = try await APIFixture.make()
        let admin = "an-admin-token-of-enough-length"
        try await fixture.test(adminToken: admin) { client in
            let deep = String(repeating: #"{"a":"#, count: 510) + "1" + String(repeating: "}", count: 510)
            let notification = #"{"appCode":"wowa","userIds":[1],"message":"# + deep + "}"
            var headers: HTTPFields = [.authorization: "Bearer \(admin)", .contentType: "application/json"]
            let refused = try await client.execute(
                uri: "/push/notifications", method: .post, headers: headers,
                body: ByteBuffer(string: notification))
            #expect(refused.status == .badRequest)
            #expect(refused.json["code"] as? String == "VALIDATION_FAILED")
            #expect((refused.json["message"] as? String)?.hasPrefix("the body nests deeper than 32 levels") == true, "\(refused.text)")

            headers[.authorization] = "Bearer \(fixture.token())"
            let arrays = String(repeating: "[", count: 40) + String(repeating: "]", count: 40)
            let registration = try await client.execute(
                uri: "/push/devices", method: .post, headers: headers,
                body: ByteBuffer(string: #"{"token":"t","platform":"ios","x":"# + arrays + "}"))
            #expect(
                registration.status == .badRequest && registration.json["code"] as? String == "VALIDATION_FAILED", "\(registration.text)")

            // Brackets inside strings are text, not nesting.
            let inString = #"{"appCode":"wowa","userIds":[1],"message":{"data":{"k":""# + String(repeating: "[{", count: 100) + #""}}}"#
            let accepted = try await client.execute(
                uri: "/push/notifications", method: .post,
                headers: [.authorization: "Bearer \(admin)", .contentType: "application/json"],
                body: ByteBuffer(string: inString))
            #expect(accepted.status == .accepted, "\(accepted.text)")
        }
    }

    @Test func nestingIsCountedOutsideStringsOnly() {
        let levels = { (count: Int) in String(repeating: "[", count: count) + String(repeating: "]", count: count) }
        #expect(Self.tooDeepAt(levels(32)) == nil)
        #expect(Self.tooDeepAt(#"{"a\\":"# + levels(32) + "}") == 38)
        #expect(Self.tooDeepAt(#"{"a":"\""# + String(repeating: "[{", count: 40) + #""}"#) == nil)
    }

    /// Where `JSONParser`, which reads every body, stops a document for nesting too deep.
    private static func tooDeepAt(_ text: String) -> Int? {
        do {
            _ = try JSONParser.parse(Array(text.utf8))
            return nil
        } catch {
            return error.problem == .tooDeep ? error.offset : nil
        }
    }

    /// Answers hold device tokens: no cache may keep any of them, and no browser may sniff them
    /// into another type. Errors and operational endpoints carry the same headers.
    @Test func everyAnswerIsUncacheableAndNotSniffed() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test { client in
            let registered = try await client.register(token: "header-test-token", as: fixture.token())
            let listed = try await client.send(.get, "/push/devices", token: fixture.token())
            let refused = try await client.send(.get, "/push/devices", token: "not-a-jwt")
            let missing = try await client.execute(uri: "/nowhere", method: .get)
            let health = try await client.execute(uri: "/healthz", method: .get)
            for (name, response) in [("register", registered), ("list", listed), ("401", refused), ("404", missing), ("healthz", health)] {
                #expect(response.headers[.cacheControl] == "no-store", "\(name)")
                #expect(response.headers[.xContentTypeOptions] == "nosniff", "\(name)")
            }
            #expect(registered.status == .created && listed.status == .ok && refused.status == .unauthorized && missing.status == .notFound)
        }
    }
}

/// One request over a plain socket, as a broken client sends it: returns what the server
/// answered before closing (empty if it only closed). With `halfClose`, the client stops
/// writing after its bytes, as one that went away mid-body.
enum RawHTTP {
    struct Failure: Error { let reason: String }

    static func exchange(port: Int, _ request: String, halfClose: Bool = false) throws -> String {
        let socket = try LoopbackSocket.connect(port: port)
        defer { close(socket) }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let bytes = Array(request.utf8)
        guard send(socket, bytes, bytes.count, Int32(MSG_NOSIGNAL)) == bytes.count else { throw Failure(reason: "send") }
        if halfClose { shutdown(socket, Int32(SHUT_WR)) }
        var answer: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = recv(socket, &buffer, buffer.count, 0)
            if count <= 0 { break }
            answer += buffer[0..<count]
        }
        return String(decoding: answer, as: UTF8.self)
    }
}
