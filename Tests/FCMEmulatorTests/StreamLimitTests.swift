import FCMEmulator
import NIOCore
import Testing

@Suite("HTTP/2 stream limit")
struct StreamLimitTests {
    @Test("connections advertise 100 concurrent streams unless configured otherwise")
    func advertised() async throws {
        try await EmulatorSession.with { session in
            let settings = try await RawHTTP2Connection.with(session.emulator) { try await $0.handshake() }
            #expect(settings[RawFrame.settingsMaxConcurrentStreams] == 100)
            session.emulator.setMaxConcurrentStreams(7)
            let changed = try await RawHTTP2Connection.with(session.emulator) { try await $0.handshake() }
            #expect(changed[RawFrame.settingsMaxConcurrentStreams] == 7)
        }
        try await EmulatorSession.with(.init(maxConcurrentStreams: 3)) { session in
            let settings = try await RawHTTP2Connection.with(session.emulator) { try await $0.handshake() }
            #expect(settings[RawFrame.settingsMaxConcurrentStreams] == 3)
        }
    }

    @Test("streams beyond the limit are refused alone, and their bodies do not use up the connection's window")
    func refusedBeyondTheLimit() async throws {
        try await EmulatorSession.with(.init(maxConcurrentStreams: 3)) { session in
            try await RawHTTP2Connection.with(session.emulator) { connection in
                _ = try await connection.handshake()
                // Sends without credentials, their bodies still to come: three streams open.
                let request = [
                    (":method", "POST"), (":scheme", "https"), (":authority", "127.0.0.1"),
                    (":path", "/v1/projects/\(Fixtures.projectID)/messages:send"),
                ]
                for stream: UInt32 in [1, 3, 5] {
                    try await connection.write(RawHTTP2Connection.headers(stream: stream, request, endStream: false))
                }
                // Six more, each with 16,000 bytes of body: 96,000 bytes, more than the
                // connection's 65,535-byte window, which must be given back for the refused ones too.
                let body = ByteBuffer(repeating: UInt8(ascii: "x"), count: 16_000)
                let refused: [UInt32] = [7, 9, 11, 13, 15, 17]
                for stream in refused {
                    try await connection.write(
                        RawHTTP2Connection.headers(stream: stream, request, endStream: false),
                        RawHTTP2Connection.data(stream: stream, body, endStream: true))
                }
                var resets: [UInt32: UInt32] = [:]
                while resets.count < refused.count {
                    let frame = try await connection.nextFrame { $0.type == RawFrame.rstStream || $0.type == RawFrame.goAway }
                    #expect(frame.type == RawFrame.rstStream, "the connection is not ended")
                    resets[frame.streamID] = frame.errorCode
                }
                #expect(resets == Dictionary(uniqueKeysWithValues: refused.map { ($0, RawFrame.refusedStream) }))

                // The open streams are still served.
                try await connection.write(RawHTTP2Connection.data(stream: 1, ByteBuffer(string: "{}"), endStream: true))
                let answer = try await connection.nextFrame { $0.type == RawFrame.headers || $0.type == RawFrame.goAway }
                #expect(answer.type == RawFrame.headers)
                #expect(answer.streamID == 1)
            }
        }
    }
}
