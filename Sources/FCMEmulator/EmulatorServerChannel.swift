import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOSSL
import NIOTLS
import Synchronization

/// The emulator's connections, TLS or plain (HTTP/1.1 only). HTTP/1.1 is Hummingbird's. HTTP/2 is
/// served on the connection's frames (`HTTP2RequestsHandler`): sends are answered where their
/// frames arrive, without the child channel, the task and the router a stream costs in
/// Hummingbird's HTTP/2 server. In the fan-out benchmark the emulator shares two cores with the
/// worker it measures, and that per-stream cost made it the largest user of the machine; real FCM
/// costs the worker's machine nothing. The other routes (token endpoint, admin API) go through
/// the router, in the connection's task. Every connection is known to the outage switch.
struct EmulatorServerChannel: HTTPChannelHandler {
    struct Value: ServerChildChannelValue {
        let negotiated: EventLoopFuture<NIONegotiatedHTTPVersion<HTTP1Channel.Value, HTTP2Connection>>
        let channel: any Channel
    }

    /// HTTP/1.1's responder (Hummingbird's, around the router).
    let responder: HTTPChannelHandler.Responder
    private let http1: HTTP1Channel
    /// Nil: plain HTTP/1.1.
    private let sslContext: NIOSSLContext?
    private let send: SendEndpoint
    private let policy: HTTP2ConnectionPolicy
    private let outage: OutageSwitch
    private let router: any HTTPResponder<BasicRequestContext>

    init(
        tlsConfiguration: TLSConfiguration?, send: SendEndpoint, policy: HTTP2ConnectionPolicy, outage: OutageSwitch,
        router: any HTTPResponder<BasicRequestContext>, responder: @escaping HTTPChannelHandler.Responder
    ) throws {
        self.sslContext = try tlsConfiguration.map { tlsConfiguration in
            var tlsConfiguration = tlsConfiguration
            tlsConfiguration.applicationProtocols = NIOHTTP2SupportedALPNProtocols
            return try NIOSSLContext(configuration: tlsConfiguration)
        }
        self.responder = responder
        // An outage drops the HTTP/1.1 requests being answered: it counts them.
        self.http1 = HTTP1Channel { [outage] request, writer, channel in
            outage.http1RequestStarted()
            defer { outage.http1RequestEnded() }
            try await responder(request, writer, channel)
        }
        self.send = send
        self.policy = policy
        self.outage = outage
        self.router = router
    }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        guard outage.admit(channel) else {
            // Unreachable: reset before TLS, as a client finds a server whose network path is lost.
            OutageCutter.reset(channel)
            return channel.eventLoop.makeSucceededFuture(
                Value(negotiated: channel.eventLoop.makeFailedFuture(OutageSwitch.Refused()), channel: channel))
        }
        return channel.eventLoop.makeCompletedFuture {
            let sync = channel.pipeline.syncOperations
            try sync.addHandler(OutageCutter(), position: .first)
            guard let sslContext else {
                return Value(negotiated: http1.setup(channel: channel, logger: logger).map { .http1_1($0) }, channel: channel)
            }
            try sync.addHandler(NIOSSLServerHandler(context: sslContext))
            let negotiation = NIOTypedApplicationProtocolNegotiationHandler<NIONegotiatedHTTPVersion<HTTP1Channel.Value, HTTP2Connection>> {
                [http1, send, policy] result in
                switch result {
                case .negotiated("h2"):
                    channel.eventLoop.makeCompletedFuture {
                        .http2(try HTTP2Connection.configure(channel, send: send, policy: policy))
                    }
                case .negotiated("http/1.1"), .fallback:
                    http1.setup(channel: channel, logger: logger).map { .http1_1($0) }
                case .negotiated:
                    channel.close().flatMapThrowing { throw NIOHTTP2Errors.invalidALPNToken() }
                }
            }
            try sync.addHandler(negotiation)
            return Value(negotiated: negotiation.protocolNegotiationResult, channel: channel)
        }
    }

    func handle(value: Value, logger: Logger) async {
        do {
            switch try await value.negotiated.get() {
            case .http1_1(let connection): await http1.handle(value: connection, logger: logger)
            case .http2(let connection): await connection.serveRoutedRequests(router: router, logger: logger)
            }
        } catch {
            logger.debug("connection ended before it was set up", metadata: ["error": "\(error)"])
        }
    }
}

/// A request for the router, from an HTTP/2 connection, and how to answer it there.
struct RoutedRequest: Sendable {
    let head: HTTPRequest
    let body: ByteBuffer
    let answer: @Sendable (GoogleResponse) -> Void
}

/// An HTTP/2 connection once ALPN chose `h2`.
struct HTTP2Connection: Sendable {
    let channel: any Channel
    private let routed: AsyncStream<RoutedRequest>

    /// Called on the channel's event loop.
    static func configure(_ channel: any Channel, send: SendEndpoint, policy: HTTP2ConnectionPolicy) throws -> HTTP2Connection {
        let (routed, continuation) = AsyncStream.makeStream(of: RoutedRequest.self)
        let maxConcurrentStreams = policy.maxConcurrentStreams
        let handler = HTTP2RequestsHandler(
            send: send, maxConcurrentStreams: maxConcurrentStreams,
            goAwayAfterStreams: policy.streamsPerConnection, routed: continuation)
        let sync = channel.pipeline.syncOperations
        try sync.addHandler(AdvertisedStreamLimit(maxConcurrentStreams))
        try sync.addHandler(NIOHTTP2Handler(mode: .server, initialSettings: HTTP2RequestsHandler.settings))
        try sync.addHandler(handler)
        return HTTP2Connection(channel: channel, routed: routed)
    }

    /// Runs the router for this connection's requests other than sends, until it closes.
    func serveRoutedRequests(router: any HTTPResponder<BasicRequestContext>, logger: Logger) async {
        await withDiscardingTaskGroup { group in
            for await request in routed {
                group.addTask { request.answer(await Self.respond(to: request, router: router, channel: channel, logger: logger)) }
            }
        }
    }

    private static func respond(
        to routed: RoutedRequest, router: any HTTPResponder<BasicRequestContext>, channel: any Channel,
        logger: Logger
    ) async -> GoogleResponse {
        let request = Request(head: routed.head, body: .init(buffer: routed.body))
        let context = BasicRequestContext(source: ApplicationRequestContextSource(channel: channel, logger: logger))
        let response: Response
        do {
            response = try await router.respond(to: request, context: context)
        } catch let error as any HTTPResponseError {
            response = (try? error.response(from: request, context: context)) ?? Response(status: error.status)
        } catch {
            response = Response(status: .internalServerError)
        }
        let body = CollectedBody()
        do {
            try await response.body.write(body.writer)
        } catch {
            return GoogleResponse(status: .internalServerError, headers: [:], body: ByteBuffer())
        }
        return GoogleResponse(status: response.status, headers: response.headers, body: body.bytes)
    }
}

/// A response body gathered into one buffer, to be written as one DATA frame.
private final class CollectedBody {
    var bytes = ByteBuffer()

    struct Writer: ResponseBodyWriter {
        let target: CollectedBody

        mutating func write(_ buffer: ByteBuffer) async throws {
            var buffer = buffer
            target.bytes.writeBuffer(&buffer)
        }

        consuming func finish(_ trailingHeaders: HTTPFields?) async throws {}
    }

    var writer: Writer { Writer(target: self) }
}

/// Serves an HTTP/2 connection's streams on its frames. NIOHTTP2Handler below keeps the protocol
/// state and outbound flow control; this handler gathers each request, answers a send at once (or
/// after its delay, on a timer), hands any other request to the router, refuses streams beyond the
/// advertised limit, and gives back the connection's inbound flow-control credit.
final class HTTP2RequestsHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    /// A stream's window holds the largest body a send may have, so that no request needs a
    /// WINDOW_UPDATE of its own; the connection's credit is given back as it is used.
    /// NIOHTTP2Handler is told of no effective stream limit: beyond its own it ends the whole
    /// connection, where RFC 9113 §5.1.2 lets a server refuse the one stream. The limit clients
    /// see is put in by AdvertisedStreamLimit, and enforced here.
    static let settings: HTTP2Settings =
        nioDefaultSettings.filter { $0.parameter != .maxConcurrentStreams } + [
            HTTP2Setting(parameter: .maxConcurrentStreams, value: Int(UInt32.max)),
            HTTP2Setting(parameter: .initialWindowSize, value: SendEndpoint.maximumBodySize + windowUpdateThreshold),
        ]
    /// The connection's window (RFC 9113 §6.9.2: 65,535 bytes, which SETTINGS do not change).
    private static let connectionWindow = 65_535
    private static let windowUpdateThreshold = 32 * 1024
    private static let droppedResponseFields: Set<HTTPField.Name> = [.contentLength, .connection, .transferEncoding, .upgrade]

    private struct Stream {
        var method: String?
        var scheme: String?
        var authority: String?
        var path: String?
        var fields = HTTPFields()
        var body = ByteBuffer()
        var tooLarge = false
    }

    private let send: SendEndpoint
    /// Streams open at once beyond this are refused (SETTINGS_MAX_CONCURRENT_STREAMS).
    private let maxConcurrentStreams: Int
    /// GOAWAY after this many streams (HTTP2ConnectionPolicy).
    private let goAwayAfterStreams: Int?
    private var streamCount = 0
    private let routed: AsyncStream<RoutedRequest>.Continuation
    /// Streams whose request is still arriving.
    private var streams: [HTTP2StreamID: Stream] = [:]
    /// Streams whose request arrived, until NIOHTTP2Handler closes them (the answer's END_STREAM
    /// went out, or the client reset them): true once answered.
    private var arrived: [HTTP2StreamID: Bool] = [:]
    private var lastStreamID = HTTP2StreamID.rootStream
    private var needsFlush = false
    private var flushScheduled = false
    private var goingAway = false
    private var closing = false

    init(send: SendEndpoint, maxConcurrentStreams: Int, goAwayAfterStreams: Int?, routed: AsyncStream<RoutedRequest>.Continuation) {
        self.send = send
        self.maxConcurrentStreams = maxConcurrentStreams
        self.goAwayAfterStreams = goAwayAfterStreams
        self.routed = routed
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        routed.finish()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        let id = frame.streamID
        switch frame.payload {
        case .headers(let headers):
            if streams[id] == nil && arrived[id] == nil {
                // A new stream (trailers find theirs). Once going away, streams the client opened
                // before it saw the GOAWAY are refused: it may send them again elsewhere (RFC 9113
                // §8.7). So are streams beyond the advertised limit (RFC 9113 §5.1.2), which a
                // client may open before our SETTINGS reach it. NIOHTTP2Handler drops the rest of a
                // reset stream's frames.
                guard !goingAway, streams.count + arrived.count < maxConcurrentStreams else {
                    context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .rstStream(.refusedStream))), promise: nil)
                    needsFlush = true
                    return
                }
                streams[id] = Self.stream(from: headers.headers)
                lastStreamID = max(lastStreamID, id)
                streamCount += 1
                if let goAwayAfterStreams, streamCount >= goAwayAfterStreams { goAway(context: context) }
            }
            if headers.endStream { requestEnded(id, context: context) }
        case .data(let data):
            guard var stream = streams[id] else { return }
            if case .byteBuffer(var bytes) = data.data, !stream.tooLarge {
                if stream.body.readableBytes + bytes.readableBytes > SendEndpoint.maximumBodySize {
                    stream.tooLarge = true
                    stream.body = ByteBuffer()
                } else {
                    stream.body.writeBuffer(&bytes)
                }
            }
            streams[id] = stream
            if data.endStream { requestEnded(id, context: context) }
            // A body beyond the limit is discarded as it comes, with credit for the stream, so
            // that the client can finish sending and read its 400.
            if stream.tooLarge && !data.endStream {
                let length = data.data.readableBytes + (data.paddingBytes.map { $0 + 1 } ?? 0)
                context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .windowUpdate(windowSizeIncrement: length))), promise: nil)
                needsFlush = true
            }
        case .rstStream:
            forget(id, context: context)
        default:
            // SETTINGS, PING, WINDOW_UPDATE and the client's GOAWAY are NIOHTTP2Handler's.
            break
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if needsFlush {
            needsFlush = false
            context.flush()
        }
        context.fireChannelReadComplete()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let closed = event as? StreamClosedEvent {
            forget(closed.streamID, context: context)
        } else if let window = event as? NIOHTTP2WindowUpdatedEvent, window.streamID == .rootStream, let inbound = window.inboundWindowSize
        {
            restoreConnectionWindow(from: inbound, context: context)
        } else if event is OutageCutter.Cut {
            send.ledger.recordOutageDroppedStreams(streams.count + arrived.values.count { !$0 })
        } else if event is ChannelShouldQuiesceEvent {
            // The server shuts down gracefully.
            goAway(context: context)
        } else if let event = event as? ChannelEvent, event == .inputClosed {
            // The client is gone (Hummingbird's server allows half-closed connections).
            context.close(promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // NIOHTTP2Handler has already reset a stream that broke the protocol; anything else ends the connection.
        if let streamError = error as? NIOHTTP2Errors.StreamError {
            forget(streamError.streamID, context: context)
        } else {
            context.close(promise: nil)
        }
    }

    /// GOAWAY as servers end connections gracefully (RFC 9113 §6.8): first one with the highest
    /// possible stream id, after which streams the client had already sent are refused here
    /// (RST_STREAM REFUSED_STREAM); the final one, naming the last stream handled, once the open
    /// ones are answered.
    ///
    /// The first is written below NIOHTTP2Handler, which so does not learn of it: once it has
    /// sent a GOAWAY it refuses a later stream's HEADERS itself, then takes that stream's DATA
    /// for a protocol error and ends the connection, the answers still owed with it. A stream
    /// we reset ourselves is one it remembers, and it drops that stream's DATA quietly.
    private func goAway(context: ChannelHandlerContext) {
        guard !goingAway else { return }
        goingAway = true
        if let below = try? context.pipeline.syncOperations.context(handlerType: NIOHTTP2Handler.self) {
            var frame = context.channel.allocator.buffer(capacity: 17)
            frame.writeInteger(UInt32(8) << 8 | 0x7)  // 24-bit length 8, type GOAWAY
            frame.writeInteger(UInt8(0))  // flags
            frame.writeInteger(UInt32(0))  // stream 0
            frame.writeInteger(UInt32(Int32.max))  // last stream id
            frame.writeInteger(UInt32(0))  // NO_ERROR
            below.writeAndFlush(NIOAny(frame), promise: nil)
        }
        closeIfDrained(context: context)
    }

    private static func stream(from headers: HPACKHeaders) -> Stream {
        var stream = Stream()
        for (name, value, _) in headers {
            switch name {
            case ":method": stream.method = value
            case ":scheme": stream.scheme = value
            case ":authority": stream.authority = value
            case ":path": stream.path = value
            default:
                if let fieldName = HTTPField.Name(name) { stream.fields.append(HTTPField(name: fieldName, value: value)) }
            }
        }
        return stream
    }

    private func requestEnded(_ id: HTTP2StreamID, context: ChannelHandlerContext) {
        guard let stream = streams.removeValue(forKey: id) else { return }
        arrived[id] = false
        if stream.method == "POST", let project = stream.path.flatMap(SendEndpoint.projectID(inPath:)) {
            switch send.decide(
                authorization: stream.fields[.authorization], projectID: String(project),
                body: stream.tooLarge ? nil : stream.body)
            {
            case .answer(let answer):
                write(answer, on: id, context: context)
            case .deliver(let admitted):
                guard let delay = admitted.delay else { return write(send.deliver(admitted), on: id, context: context) }
                context.eventLoop.assumeIsolated().scheduleTask(in: TimeAmount(delay)) { [self] in
                    write(send.deliver(admitted), on: id, context: context)
                    flushSoon(context: context)
                }
            }
            return
        }
        guard let method = stream.method.flatMap({ HTTPRequest.Method($0) }), !stream.tooLarge else {
            return write(
                GoogleResponse(status: stream.tooLarge ? .contentTooLarge : .badRequest, headers: [:], body: ByteBuffer()),
                on: id, context: context)
        }
        let head = HTTPRequest(
            method: method, scheme: stream.scheme, authority: stream.authority, path: stream.path,
            headerFields: stream.fields)
        let connection = NIOLoopBound((handler: self, context: context), eventLoop: context.eventLoop)
        routed.yield(
            RoutedRequest(head: head, body: stream.body) { answer in
                connection.eventLoop.execute {
                    connection.value.handler.write(answer, on: id, context: connection.value.context)
                    connection.value.context.flush()
                }
            })
    }

    /// One flush for every delayed answer whose timer fires in the same turn of the event loop
    /// (under a latency profile, a flush per answer was a TLS record and a syscall each, and made
    /// the emulator the largest user of the machine it shares with the worker it measures).
    private func flushSoon(context: ChannelHandlerContext) {
        guard !flushScheduled else { return }
        flushScheduled = true
        context.eventLoop.assumeIsolated().execute { [self] in
            flushScheduled = false
            context.flush()
        }
    }

    /// Writes an answer as HEADERS and one DATA frame, unless the client reset the stream meanwhile.
    private func write(_ answer: GoogleResponse, on id: HTTP2StreamID, context: ChannelHandlerContext) {
        guard arrived[id] == false else { return }
        arrived[id] = true
        var headers = HPACKHeaders([(":status", String(answer.status.code))])
        // The length is ours to state; HTTP/1.1's connection headers are not HTTP/2's (RFC 9113 §8.2.2).
        for field in answer.headers where !Self.droppedResponseFields.contains(field.name) {
            headers.add(name: field.name.canonicalName, value: field.value)
        }
        let hasBody = answer.body.readableBytes > 0
        if answer.status != .noContent { headers.add(name: "content-length", value: String(answer.body.readableBytes)) }
        context.write(
            wrapOutboundOut(HTTP2Frame(streamID: id, payload: .headers(.init(headers: headers, endStream: !hasBody)))), promise: nil)
        if hasBody {
            context.write(
                wrapOutboundOut(HTTP2Frame(streamID: id, payload: .data(.init(data: .byteBuffer(answer.body), endStream: true)))),
                promise: nil)
        }
        needsFlush = true
    }

    private func forget(_ id: HTTP2StreamID, context: ChannelHandlerContext) {
        streams[id] = nil
        arrived[id] = nil
        // A stream closes while NIOHTTP2Handler writes its last frame: the closing writes wait for that to end.
        context.eventLoop.assumeIsolated().execute { [self] in closeIfDrained(context: context) }
    }

    /// Ends a connection that is going away once its last answer is on the wire: a final GOAWAY
    /// goes after it, then only our side closes (TLS close_notify, FIN) and the client closes its
    /// own. Closing both at once would reset the connection while the client still sends (its
    /// WINDOW_UPDATEs, streams it wrote before the GOAWAY reached it), and a reset discards the
    /// answers it has not read yet. A client that never closes is closed on after a few seconds.
    private func closeIfDrained(context: ChannelHandlerContext) {
        guard goingAway, !closing, streams.isEmpty, arrived.isEmpty, context.channel.isActive else { return }
        closing = true
        context.writeAndFlush(wrapOutboundOut(goAwayFrame), promise: nil)
        context.close(mode: .output, promise: nil)
        context.eventLoop.assumeIsolated().scheduleTask(in: .seconds(5)) { context.close(promise: nil) }
    }

    private var goAwayFrame: HTTP2Frame {
        HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: lastStreamID, errorCode: .noError, opaqueData: nil))
    }

    /// Gives the client back the connection window its DATA used, half of it at a time (as
    /// NIOHTTP2's own stream multiplexer does). NIOHTTP2Handler reports the window after every
    /// frame, so DATA it drops itself (a reset stream's) is given back too.
    private func restoreConnectionWindow(from window: Int, context: ChannelHandlerContext) {
        let used = Self.connectionWindow - window
        guard used >= Self.windowUpdateThreshold else { return }
        context.write(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: used))), promise: nil)
        needsFlush = true
    }
}

/// How HTTP/2 connections opened from now on behave: the stream limit they advertise, and when
/// they are ended with GOAWAY. Google's front ends end connections now and then, and a client must
/// send the streams above the GOAWAY's last stream id again (RFC 9113 §6.8).
final class HTTP2ConnectionPolicy: Sendable {
    private let goAwayAfter: Atomic<Int>
    private let streamLimit: Atomic<Int>

    static let maxConcurrentStreamsRange = 1...Int(UInt32.max)

    init(streamsPerConnection: Int?, maxConcurrentStreams: Int) {
        precondition(Self.maxConcurrentStreamsRange.contains(maxConcurrentStreams), "maxConcurrentStreams must be in 1...\(UInt32.max)")
        goAwayAfter = Atomic(streamsPerConnection ?? 0)
        streamLimit = Atomic(maxConcurrentStreams)
    }

    /// GOAWAY after this many streams; nil: never.
    var streamsPerConnection: Int? {
        get {
            let value = goAwayAfter.load(ordering: .relaxed)
            return value > 0 ? value : nil
        }
        set { goAwayAfter.store(newValue ?? 0, ordering: .relaxed) }
    }

    /// SETTINGS_MAX_CONCURRENT_STREAMS.
    var maxConcurrentStreams: Int {
        get { streamLimit.load(ordering: .relaxed) }
        set {
            precondition(Self.maxConcurrentStreamsRange.contains(newValue), "maxConcurrentStreams must be in 1...\(UInt32.max)")
            streamLimit.store(newValue, ordering: .relaxed)
        }
    }
}

/// Below NIOHTTP2Handler: puts the advertised SETTINGS_MAX_CONCURRENT_STREAMS into the server's
/// first SETTINGS frame, the first bytes NIOHTTP2Handler writes, then leaves the pipeline
/// (HTTP2RequestsHandler.settings says why NIOHTTP2Handler writes another value).
final class AdvertisedStreamLimit: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = IOData
    typealias OutboundOut = IOData

    private static let frameHeaderLength = 9
    private static let settingsFrameType: UInt8 = 0x4
    private static let maxConcurrentStreamsIdentifier: UInt16 = 0x3
    private let maxConcurrentStreams: UInt32

    init(_ maxConcurrentStreams: Int) {
        self.maxConcurrentStreams = UInt32(maxConcurrentStreams)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard case .byteBuffer(var bytes) = unwrapOutboundIn(data) else { return context.write(data, promise: promise) }
        let start = bytes.readerIndex
        if bytes.getInteger(at: start + 3, as: UInt8.self) == Self.settingsFrameType,
            let length = bytes.getInteger(at: start, as: UInt32.self).map({ Int($0 >> 8) })
        {
            var offset = start + Self.frameHeaderLength
            while offset + 6 <= start + Self.frameHeaderLength + length {
                if bytes.getInteger(at: offset, as: UInt16.self) == Self.maxConcurrentStreamsIdentifier {
                    bytes.setInteger(maxConcurrentStreams, at: offset + 2)
                }
                offset += 6
            }
        }
        context.write(wrapOutboundOut(.byteBuffer(bytes)), promise: promise)
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }
}
