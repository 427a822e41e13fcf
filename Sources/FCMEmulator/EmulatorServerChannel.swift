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

/// The emulator's TLS connections. HTTP/1.1 is Hummingbird's. HTTP/2 is served on the connection's
/// frames (`HTTP2RequestsHandler`): sends are answered where their frames arrive, without the child
/// channel, the task and the router a stream costs in Hummingbird's HTTP/2 server. In the fan-out
/// benchmark the emulator shares two cores with the worker it measures, and that per-stream cost made
/// it the largest user of the machine; real FCM costs the worker's machine nothing. The other routes
/// (token endpoint, admin API) go through the router, in the connection's task.
struct EmulatorServerChannel: HTTPChannelHandler {
    struct Value: ServerChildChannelValue {
        let negotiated: EventLoopFuture<NIONegotiatedHTTPVersion<HTTP1Channel.Value, HTTP2Connection>>
        let channel: any Channel
    }

    /// HTTP/1.1's responder (Hummingbird's, around the router).
    let responder: HTTPChannelHandler.Responder
    private let http1: HTTP1Channel
    private let sslContext: NIOSSLContext
    private let send: SendEndpoint
    private let recycling: ConnectionRecycling
    private let router: any HTTPResponder<BasicRequestContext>

    init(tlsConfiguration: TLSConfiguration, send: SendEndpoint, recycling: ConnectionRecycling,
         router: any HTTPResponder<BasicRequestContext>, responder: @escaping HTTPChannelHandler.Responder) throws {
        var tlsConfiguration = tlsConfiguration
        tlsConfiguration.applicationProtocols = NIOHTTP2SupportedALPNProtocols
        self.sslContext = try NIOSSLContext(configuration: tlsConfiguration)
        self.responder = responder
        self.http1 = HTTP1Channel(responder: responder)
        self.send = send
        self.recycling = recycling
        self.router = router
    }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            let sync = channel.pipeline.syncOperations
            try sync.addHandler(NIOSSLServerHandler(context: sslContext))
            let negotiation = NIOTypedApplicationProtocolNegotiationHandler<NIONegotiatedHTTPVersion<HTTP1Channel.Value, HTTP2Connection>> {
                [http1, send, recycling] result in
                switch result {
                case .negotiated("h2"):
                    channel.eventLoop.makeCompletedFuture {
                        .http2(try HTTP2Connection.configure(channel, send: send, streamLimit: recycling.streamsPerConnection))
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
    static func configure(_ channel: any Channel, send: SendEndpoint, streamLimit: Int?) throws -> HTTP2Connection {
        let (routed, continuation) = AsyncStream.makeStream(of: RoutedRequest.self)
        let handler = HTTP2RequestsHandler(send: send, streamLimit: streamLimit, routed: continuation)
        let sync = channel.pipeline.syncOperations
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

    private static func respond(to routed: RoutedRequest, router: any HTTPResponder<BasicRequestContext>, channel: any Channel,
                                logger: Logger) async -> GoogleResponse {
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
/// after its scripted delay, on a timer), hands any other request to the router, and gives back the
/// connection's inbound flow-control credit.
final class HTTP2RequestsHandler: ChannelInboundHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundOut = HTTP2Frame

    /// A stream's window holds the largest body a send may have, so that no request needs a
    /// WINDOW_UPDATE of its own; the connection's credit is given back as it is used.
    static let settings: HTTP2Settings = nioDefaultSettings + [
        HTTP2Setting(parameter: .initialWindowSize, value: SendEndpoint.maximumBodySize + windowUpdateThreshold)
    ]
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
    /// GOAWAY after this many streams (ConnectionRecycling).
    private let streamLimit: Int?
    private var streamCount = 0
    private let routed: AsyncStream<RoutedRequest>.Continuation
    /// Streams whose request is still arriving.
    private var streams: [HTTP2StreamID: Stream] = [:]
    /// Streams whose request arrived, until NIOHTTP2Handler closes them (the answer's END_STREAM
    /// went out, or the client reset them): true once answered.
    private var arrived: [HTTP2StreamID: Bool] = [:]
    private var lastStreamID = HTTP2StreamID.rootStream
    private var connectionUnacknowledgedBytes = 0
    private var needsFlush = false
    private var goingAway = false
    private var closing = false

    init(send: SendEndpoint, streamLimit: Int?, routed: AsyncStream<RoutedRequest>.Continuation) {
        self.send = send
        self.streamLimit = streamLimit
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
                // §8.7), and NIOHTTP2Handler drops the rest of a reset stream's frames.
                guard !goingAway else {
                    context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .rstStream(.refusedStream))), promise: nil)
                    needsFlush = true
                    return
                }
                streams[id] = Self.stream(from: headers.headers)
                lastStreamID = max(lastStreamID, id)
                streamCount += 1
                if let streamLimit, streamCount >= streamLimit { goAway(context: context) }
            }
            if headers.endStream { requestEnded(id, context: context) }
        case .data(let data):
            let length = data.data.readableBytes + (data.paddingBytes.map { $0 + 1 } ?? 0)
            guard var stream = streams[id] else { return returnCredit(length, context: context) }
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
            // As in push-worker's client, credit goes back after the frame is taken in. A body
            // beyond the limit is discarded as it comes, with credit for the stream too, so that
            // the client can finish sending and read its 400.
            returnCredit(length, context: context, stream: stream.tooLarge && !data.endStream ? id : nil)
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
            switch send.decide(authorization: stream.fields[.authorization], projectID: String(project),
                               body: stream.tooLarge ? nil : stream.body) {
            case .answer(let answer):
                write(answer, on: id, context: context)
            case .deliver(let admitted):
                guard let delay = admitted.delay else { return write(send.deliver(admitted), on: id, context: context) }
                context.eventLoop.assumeIsolated().scheduleTask(in: TimeAmount(delay)) { [self] in
                    write(send.deliver(admitted), on: id, context: context)
                    context.flush()
                }
            }
            return
        }
        guard let method = stream.method.flatMap({ HTTPRequest.Method($0) }), !stream.tooLarge else {
            return write(GoogleResponse(status: stream.tooLarge ? .contentTooLarge : .badRequest, headers: [:], body: ByteBuffer()),
                         on: id, context: context)
        }
        let head = HTTPRequest(method: method, scheme: stream.scheme, authority: stream.authority, path: stream.path,
                               headerFields: stream.fields)
        let connection = NIOLoopBound((handler: self, context: context), eventLoop: context.eventLoop)
        routed.yield(RoutedRequest(head: head, body: stream.body) { answer in
            connection.eventLoop.execute {
                connection.value.handler.write(answer, on: id, context: connection.value.context)
                connection.value.context.flush()
            }
        })
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
        context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .headers(.init(headers: headers, endStream: !hasBody)))), promise: nil)
        if hasBody {
            context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .data(.init(data: .byteBuffer(answer.body), endStream: true)))),
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

    /// Gives the client back the connection window its DATA used, half a default window at a time,
    /// and a discarding stream's window at once.
    private func returnCredit(_ length: Int, context: ChannelHandlerContext, stream: HTTP2StreamID? = nil) {
        guard length > 0 else { return }
        if let stream {
            context.write(wrapOutboundOut(HTTP2Frame(streamID: stream, payload: .windowUpdate(windowSizeIncrement: length))), promise: nil)
            needsFlush = true
        }
        connectionUnacknowledgedBytes += length
        guard connectionUnacknowledgedBytes >= Self.windowUpdateThreshold else { return }
        context.write(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: connectionUnacknowledgedBytes))),
                      promise: nil)
        connectionUnacknowledgedBytes = 0
        needsFlush = true
    }
}

/// When HTTP/2 connections are ended with GOAWAY: Google's front ends do it now and then, and a
/// client must send the streams above the GOAWAY's last stream id again (RFC 9113 §6.8).
/// A new limit applies to connections opened after it is set.
final class ConnectionRecycling: Sendable {
    private let limit: Atomic<Int>

    init(streamsPerConnection: Int?) {
        limit = Atomic(streamsPerConnection ?? 0)
    }

    var streamsPerConnection: Int? {
        get {
            let value = limit.load(ordering: .relaxed)
            return value > 0 ? value : nil
        }
        set { limit.store(newValue ?? 0, ordering: .relaxed) }
    }
}
