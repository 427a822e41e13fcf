import FCMEmulator
import NIOCore
import NIOPosix
import NIOSSL

/// One HTTP/2 frame as it crossed the wire.
struct RawFrame: Sendable {
    static let data: UInt8 = 0x0
    static let headers: UInt8 = 0x1
    static let rstStream: UInt8 = 0x3
    static let settings: UInt8 = 0x4
    static let ping: UInt8 = 0x6
    static let goAway: UInt8 = 0x7
    static let settingsMaxConcurrentStreams: UInt16 = 0x3
    static let refusedStream: UInt32 = 0x7

    var type: UInt8
    var flags: UInt8
    var streamID: UInt32
    var payload: ByteBuffer

    var isSettingsAcknowledgement: Bool { type == Self.settings && flags & 0x1 != 0 }

    /// The parameters of a SETTINGS frame.
    var settings: [UInt16: UInt32] {
        var payload = payload
        var settings: [UInt16: UInt32] = [:]
        while let identifier = payload.readInteger(as: UInt16.self), let value = payload.readInteger(as: UInt32.self) {
            settings[identifier] = value
        }
        return settings
    }

    /// The error code of an RST_STREAM frame.
    var errorCode: UInt32? {
        type == Self.rstStream ? payload.getInteger(at: payload.readerIndex, as: UInt32.self) : nil
    }
}

/// An HTTP/2 connection to the emulator over TLS, spoken frame by frame: for what client
/// libraries hide (the server's SETTINGS) or never do (open streams beyond the server's limit).
final class RawHTTP2Connection {
    private var inbound: NIOAsyncChannelInboundStream<RawFrame>.AsyncIterator
    private let outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>

    private init(inbound: NIOAsyncChannelInboundStream<RawFrame>, outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>) {
        self.inbound = inbound.makeAsyncIterator()
        self.outbound = outbound
    }

    /// Connects (TCP and TLS with ALPN h2 only), runs `body`, and closes the connection.
    static func with<T: Sendable>(_ emulator: RunningEmulator, _ body: (RawHTTP2Connection) async throws -> T) async throws -> T {
        guard let caFile = emulator.caFilePath else { throw RawHTTP2Error.noTLS }
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(caFile))
        tls.certificateVerification = .noHostnameVerification
        tls.applicationProtocols = ["h2"]
        let sslContext = try NIOSSLContext(configuration: tls)
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: emulator.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(NIOSSLClientHandler(context: sslContext, serverHostname: nil))
                    try sync.addHandler(ByteToMessageHandler(RawFrameDecoder()))
                    return try NIOAsyncChannel<RawFrame, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
        return try await channel.executeThenClose { inbound, outbound in
            try await body(RawHTTP2Connection(inbound: inbound, outbound: outbound))
        }
    }

    /// The client preface and an empty SETTINGS; answers the server's SETTINGS and returns them.
    func handshake() async throws -> [UInt16: UInt32] {
        try await write(ByteBuffer(string: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), Self.frame(type: RawFrame.settings, stream: 0))
        let settings = try await nextFrame { $0.type == RawFrame.settings && !$0.isSettingsAcknowledgement }
        try await write(Self.frame(type: RawFrame.settings, flags: 0x1, stream: 0))
        return settings.settings
    }

    /// Returns once the server answered a PING, so has taken in every frame written before.
    func ping() async throws {
        try await write(Self.frame(type: RawFrame.ping, stream: 0, payload: ByteBuffer(bytes: [0, 0, 0, 0, 0, 0, 0, 1])))
        _ = try await nextFrame { $0.type == RawFrame.ping && $0.flags & 0x1 != 0 }
    }

    func write(_ bytes: ByteBuffer...) async throws {
        try await outbound.write(contentsOf: bytes)
    }

    /// The next frame from the server; nil once the connection ended cleanly.
    func next() async throws -> RawFrame? {
        try await inbound.next()
    }

    /// Skips frames until one satisfies `predicate`.
    func nextFrame(where predicate: (RawFrame) -> Bool) async throws -> RawFrame {
        while let frame = try await next() {
            if predicate(frame) { return frame }
        }
        throw RawHTTP2Error.connectionEnded
    }

    /// A HEADERS frame, its fields as HPACK literals without indexing or Huffman coding.
    static func headers(stream: UInt32, _ fields: [(String, String)], endStream: Bool) -> ByteBuffer {
        var block = ByteBuffer()
        for (name, value) in fields {
            block.writeInteger(UInt8(0))
            writeString(name, to: &block)
            writeString(value, to: &block)
        }
        return frame(type: RawFrame.headers, flags: 0x4 | (endStream ? 0x1 : 0), stream: stream, payload: block)
    }

    /// HEADERS and DATA of a send to the emulator's project.
    static func send(stream: UInt32, accessToken: String, body: String) -> ByteBuffer {
        var frames = headers(
            stream: stream,
            [
                (":method", "POST"), (":scheme", "https"), (":authority", "127.0.0.1"),
                (":path", "/v1/projects/\(Fixtures.projectID)/messages:send"),
                ("authorization", "Bearer \(accessToken)"), ("content-type", "application/json"),
            ], endStream: false)
        frames.writeImmutableBuffer(data(stream: stream, ByteBuffer(string: body), endStream: true))
        return frames
    }

    static func data(stream: UInt32, _ payload: ByteBuffer, endStream: Bool) -> ByteBuffer {
        frame(type: RawFrame.data, flags: endStream ? 0x1 : 0, stream: stream, payload: payload)
    }

    private static func frame(type: UInt8, flags: UInt8 = 0, stream: UInt32, payload: ByteBuffer = ByteBuffer()) -> ByteBuffer {
        var frame = ByteBuffer()
        frame.writeInteger(UInt32(payload.readableBytes) << 8 | UInt32(type))
        frame.writeInteger(flags)
        frame.writeInteger(stream)
        frame.writeImmutableBuffer(payload)
        return frame
    }

    /// An HPACK string literal: its length as an integer with a 7-bit prefix (RFC 7541 §5.1), then its bytes.
    private static func writeString(_ text: String, to buffer: inout ByteBuffer) {
        var length = text.utf8.count
        if length < 127 {
            buffer.writeInteger(UInt8(length))
        } else {
            buffer.writeInteger(UInt8(127))
            length -= 127
            while length >= 128 {
                buffer.writeInteger(UInt8(length % 128 + 128))
                length /= 128
            }
            buffer.writeInteger(UInt8(length))
        }
        buffer.writeString(text)
    }
}

enum RawHTTP2Error: Error {
    case noTLS
    case connectionEnded
}

private struct RawFrameDecoder: ByteToMessageDecoder {
    typealias InboundOut = RawFrame

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let lengthAndType = buffer.getInteger(at: buffer.readerIndex, as: UInt32.self),
            buffer.readableBytes >= 9 + Int(lengthAndType >> 8)
        else { return .needMoreData }
        buffer.moveReaderIndex(forwardBy: 4)
        let flags = buffer.readInteger(as: UInt8.self) ?? 0
        let streamID = (buffer.readInteger(as: UInt32.self) ?? 0) & 0x7fff_ffff
        let payload = buffer.readSlice(length: Int(lengthAndType >> 8)) ?? ByteBuffer()
        context.fireChannelRead(
            wrapInboundOut(
                RawFrame(
                    type: UInt8(truncatingIfNeeded: lengthAndType), flags: flags,
                    streamID: streamID, payload: payload)))
        return .continue
    }
}
