import FCMEmulator
import Foundation
import Testing

@Suite("Outages")
struct OutageTests {
    @Test("an outage resets open connections unanswered and refuses new ones; afterwards sends succeed again")
    func outage() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            let emulator = session.emulator
            let accessToken = try await session.accessToken(for: fixture)
            emulator.script(token: "in-flight", .slow(.milliseconds(2500)))
            let admitted = try await RawHTTP2Connection.with(emulator) { connection in
                _ = try await connection.handshake()
                try await connection.write(
                    RawHTTP2Connection.send(stream: 1, accessToken: accessToken, body: EmulatorSession.message(token: "in-flight")))
                // Taken in, the send waits out its delay while the outage begins.
                try await connection.ping()
                let admitted = ContinuousClock.now
                emulator.beginOutage(for: .seconds(2))
                // Reset: the inbound side ends, cleanly or with an error, without an answer.
                var answered = false
                do {
                    while let frame = try await connection.next() {
                        answered = answered || (frame.type == RawFrame.headers && frame.streamID == 1)
                    }
                } catch {}
                #expect(!answered, "no answer to the stream in flight")
                return admitted
            }

            await #expect(throws: (any Error).self, "a new connection is reset before TLS") {
                try await RawHTTP2Connection.with(emulator) { connection in try await connection.handshake() }
            }
            #expect(emulator.stats.outageRefusedConnections == 1)
            #expect(emulator.stats.outageDroppedStreams == 1)

            try await Task.sleep(until: admitted + .milliseconds(2200))
            let after = try await session.send(accessToken: accessToken, body: EmulatorSession.message(token: "after"))
            #expect(after.status == 200)
            #expect(after.version == .http2)
            // Admitted before the outage, so delivered once its delay is over, although its answer was lost.
            #expect(await Self.eventually { emulator.stats(for: "in-flight").accepted == 1 })
        }
    }

    @Test("endOutage serves new connections at once")
    func endOutage() async throws {
        try await EmulatorSession.with { session in
            session.emulator.beginOutage(for: .seconds(60))
            await #expect(throws: (any Error).self) {
                try await RawHTTP2Connection.with(session.emulator) { connection in try await connection.handshake() }
            }
            session.emulator.endOutage()
            let settings = try await RawHTTP2Connection.with(session.emulator) { connection in try await connection.handshake() }
            #expect(!settings.isEmpty)
        }
    }

    @Test("the admin API answers 202, then the emulator, admin API included, is unreachable for the outage")
    func adminAPI() async throws {
        try await EmulatorSession.with { session in
            let json = [("Content-Type", "application/json")]
            #expect(try await session.request(.POST, "/emulator/outage", body: #"{"seconds":-1}"#, headers: json).status == 400)
            #expect(try await session.request(.POST, "/emulator/outage", body: #"{}"#, headers: json).status == 400)

            #expect(try await session.request(.POST, "/emulator/outage", body: #"{"seconds":2}"#, headers: json).status == 202)
            // The outage begins a tenth of a second after the answer: new connections are soon reset.
            var refusedAt: ContinuousClock.Instant?
            let giveUp = ContinuousClock.now + .seconds(2)
            while refusedAt == nil && ContinuousClock.now < giveUp {
                do {
                    _ = try await RawHTTP2Connection.with(session.emulator) { connection in try await connection.handshake() }
                    try await Task.sleep(for: .milliseconds(50))
                } catch {
                    refusedAt = ContinuousClock.now
                }
            }
            // That one may have been cut while its handshake was under way; the outage is on now.
            let outageOn = try #require(refusedAt, "a connection fails once the outage began")
            await #expect(throws: (any Error).self, "a new connection is reset before TLS") {
                try await RawHTTP2Connection.with(session.emulator) { connection in try await connection.handshake() }
            }

            // The outage lasts 2 s, and was on at `outageOn`.
            try await Task.sleep(until: outageOn + .milliseconds(2200))
            let stats = try await session.request(.GET, "/emulator/stats?devices=false")
            #expect(stats.status == 200)
            #expect((stats.json["outage_refused_connections"] as? Int ?? 0) >= 1)
            #expect(stats.json["outage_dropped_streams"] as? Int == 0)
        }
    }

    /// Whether `condition` holds within `timeout`, checked every 50 ms: timers run late on a busy machine.
    private static func eventually(within timeout: Duration = .seconds(5), _ condition: () -> Bool) async -> Bool {
        let giveUp = ContinuousClock.now + timeout
        while !condition() {
            guard ContinuousClock.now < giveUp, (try? await Task.sleep(for: .milliseconds(50))) != nil else { return false }
        }
        return true
    }
}
