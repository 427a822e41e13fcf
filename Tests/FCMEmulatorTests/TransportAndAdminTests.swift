import AsyncHTTPClient
import FCMEmulator
import Foundation
import NIOCore
import NIOHTTP1
import NIOSSL
import Testing

@Suite("Transport and admin API")
struct TransportAndAdminTests {
    @Test("without TLS the emulator serves plain HTTP/1.1")
    func plainHTTP() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with(.init(tls: false)) { session in
            #expect(session.emulator.baseURL.hasPrefix("http://127.0.0.1:"))
            #expect(session.emulator.caFilePath == nil)
            let accessToken = try await session.accessToken(for: fixture)
            let result = try await session.send(accessToken: accessToken, body: EmulatorSession.message(token: "plain"))
            #expect(result.status == 200)
            #expect(result.version == .http1_1)
        }
    }

    @Test("an HTTP/1.1-only client is served over TLS too")
    func http1OverTLS() async throws {
        try await FCMEmulator.withRunning { emulator in
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(try #require(emulator.caFilePath)))
            var configuration = HTTPClient.Configuration(tlsConfiguration: tls)
            configuration.httpVersion = .http1Only
            let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
            let response: HTTPClientResponse
            do {
                response = try await client.execute(HTTPClientRequest(url: emulator.baseURL + "/emulator/stats"), timeout: .seconds(30))
            } catch {
                try await client.shutdown()
                throw error
            }
            try await client.shutdown()
            #expect(response.status == .ok)
            #expect(response.version == .http1_1)
        }
    }

    @Test("a port already in use fails the start instead of hanging")
    func portInUse() async throws {
        try await FCMEmulator.withRunning(.init(tls: false)) { first in
            await #expect(throws: (any Error).self) {
                try await FCMEmulator.withRunning(.init(port: first.port, tls: false)) { _ in }
            }
        }
    }

    @Test("the CA file holds the PEM the emulator reports")
    func caFile() async throws {
        let path = try await EmulatorSession.with { session in
            let path = try #require(session.emulator.caFilePath)
            #expect(try String(contentsOfFile: path, encoding: .utf8) == session.emulator.caCertificatePEM)
            #expect(session.emulator.caCertificatePEM?.hasPrefix("-----BEGIN CERTIFICATE-----") == true)
            return path
        }
        #expect(!FileManager.default.fileExists(atPath: path), "a temporary CA file is removed at shutdown")
    }

    @Test("the admin API registers accounts, scripts tokens and reports stats")
    func adminAPI() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            let json = ["Content-Type": "application/json"].map { ($0.key, $0.value) }
            let publicPart = """
                {"client_email":"\(fixture.clientEmail)","project_id":"\(fixture.projectID)","private_key_id":"\(fixture.privateKeyID)",
                 "public_key":\(String(decoding: try JSONEncoder().encode(fixture.privateKey.publicKey.pemRepresentation), as: UTF8.self))}
                """
            #expect(try await session.request(.POST, "/emulator/service-accounts", body: publicPart, headers: json).status == 201)
            let assertion = try Assertion.standard(for: fixture, audience: session.emulator.tokenURL).signed(with: fixture.privateKey)
            let accessToken = try #require(try await session.exchange(assertion: assertion).json["access_token"] as? String)

            let script = #"{"token":"admin-device","outcome":"quota_exceeded","times":1,"retry_after":30}"#
            #expect(try await session.request(.POST, "/emulator/script", body: script, headers: json).status == 204)
            let throttled = try await session.send(accessToken: accessToken, body: EmulatorSession.message(token: "admin-device"))
            #expect(throttled.status == 429)
            #expect(throttled.headers.first(name: "Retry-After") == "30")
            #expect(try await session.send(accessToken: accessToken, body: EmulatorSession.message(token: "admin-device")).status == 200)

            let unknown = #"{"token":"x","outcome":"exploded"}"#
            #expect(try await session.request(.POST, "/emulator/script", body: unknown, headers: json).status == 400)

            let stats = try await session.request(.GET, "/emulator/stats")
            #expect(stats.json["accepted"] as? Int == 1)
            #expect(stats.json["rejected"] as? Int == 1)
            #expect(stats.json["token_exchanges"] as? Int == 1)
            let device = (stats.json["devices"] as? [String: Any])?["admin-device"] as? [String: Any]
            #expect(device?["accepted"] as? Int == 1)

            let message = try await session.request(.GET, "/emulator/messages?token=admin-device")
            #expect(message.json["token"] as? String == "admin-device")

            #expect(try await session.request(.POST, "/emulator/reset").status == 204)
            #expect(try await session.request(.GET, "/emulator/stats?devices=false").json["accepted"] as? Int == 0)
        }
    }
}

/// HTTP/2 is served on the connection's frames (`EmulatorServerChannel`): its edges.
@Suite("HTTP/2 connections")
struct HTTP2ConnectionTests {
    @Test("a body over the 1 MiB limit is refused as too big, and the connection keeps serving")
    func bodyOverTheLimit() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            let accessToken = try await session.accessToken(for: fixture)
            // More than the stream's initial window (1 MiB + 32 KiB): the client can only finish
            // sending if the server keeps giving credit for what it discards.
            let huge = EmulatorSession.message(token: "huge", data: #"{"blob":"\#(String(repeating: "x", count: 1_200_000))"}"#)
            let refused = try await session.send(accessToken: accessToken, body: huge)
            #expect(refused.version == .http2)
            #expect(refused.status == 400)
            #expect(refused.errorMessage?.hasPrefix("Message is too big") == true)
            let accepted = try await session.send(accessToken: accessToken, body: EmulatorSession.message(token: "after-huge"))
            #expect(accepted.status == 200)
            #expect(session.emulator.stats(for: "after-huge").accepted == 1)
            #expect(session.emulator.stats.accepted == 1)
        }
    }

    @Test("routed answers (token endpoint, admin API) are valid HTTP/2 answers with one content-length")
    func routedAnswers() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            _ = try await session.accessToken(for: fixture)
            let stats = try await session.request(.GET, "/emulator/stats")
            #expect(stats.version == .http2)
            #expect(stats.status == 200)
            #expect(stats.headers["content-length"] == [String(stats.body.utf8.count)])
            #expect(stats.json["token_exchanges"] as? Int == 1)
            let missing = try await session.request(.GET, "/emulator/no-such-route")
            #expect(missing.status == 404)
            #expect(missing.headers["content-length"].count <= 1)
        }
    }

    @Test("a graceful shutdown answers the sends in flight before it closes the connection")
    func gracefulShutdownAnswersInFlightSends() async throws {
        let fixture = try Fixtures.primary()
        let (admitted, admittedContinuation) = AsyncStream.makeStream(of: ContinuousClock.Instant.self)
        let (frames, elapsed) = try await withThrowingTaskGroup(of: ([RawFrame], Duration).self) { group in
            try await EmulatorSession.with { session in
                let accessToken = try await session.accessToken(for: fixture)
                session.emulator.script(token: "in-flight", .slow(.seconds(1)))
                group.addTask {
                    defer { admittedContinuation.finish() }
                    return try await RawHTTP2Connection.with(session.emulator) { connection in
                        _ = try await connection.handshake()
                        try await connection.write(
                            RawHTTP2Connection.send(stream: 1, accessToken: accessToken, body: EmulatorSession.message(token: "in-flight")))
                        try await connection.ping()
                        let started = ContinuousClock.now
                        admittedContinuation.yield(started)
                        var frames: [RawFrame] = []
                        while let frame = try await connection.next() { frames.append(frame) }
                        return (frames, ContinuousClock.now - started)
                    }
                }
                // The send was taken in and waits out its delay; leaving begins the shutdown.
                for await _ in admitted { break }
                #expect(session.emulator.stats(for: "in-flight") == DeviceStats(), "still in flight when the shutdown begins")
            }
            return try await group.next() ?? ([], .zero)
        }
        // HTTP/2's static table holds ":status: 200" at index 8, which HPACK writes as the byte 0x88.
        #expect(
            frames.contains {
                $0.type == RawFrame.headers && $0.streamID == 1 && $0.payload.getInteger(at: $0.payload.readerIndex, as: UInt8.self) == 0x88
            })
        #expect(frames.last?.type == RawFrame.goAway)
        // Answered after its delay, and well before the 5 s the shutdown waits for a connection left open.
        #expect(elapsed < .seconds(4))
    }
}
