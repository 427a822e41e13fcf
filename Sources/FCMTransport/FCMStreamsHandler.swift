import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOTLS
import Synchronization

/// One FCM request: its path and JSON body (the batch carries the headers they share).
public struct FCMRequest: Sendable {
    public let path: String
    public let body: ByteBuffer

    public init(path: String, body: ByteBuffer) {
        self.path = path
        self.body = body
    }
}

/// FCM's raw answer to one request, and how long it took from write to the stream's end.
public struct FCMResponse: Sendable {
    public var status: Int
    public var body: ByteBuffer
    public var retryAfter: String?
    public var elapsed: Duration

    public init(status: Int, body: ByteBuffer, retryAfter: String? = nil, elapsed: Duration) {
        self.status = status
        self.body = body
        self.retryAfter = retryAfter
        self.elapsed = elapsed
    }
}

/// Why a request got no answer. Every case is transient by the protocol's rules; they differ in
/// whether FCM may have acted on the request (`reachedServer`).
public enum FCMTransportError: Error, Sendable, CustomStringConvertible {
    case connectFailed(String)
    /// TLS chose another protocol than `h2` (ALPN): FCM HTTP v1 here is spoken over HTTP/2 only.
    case notHTTP2(negotiated: String?)
    /// The request never left this process: the connection closed or went away before its
    /// frames were written, or it waited for a connection past its deadline.
    case notWritten(String)
    /// Waited for a stream of a busy connection past its deadline, never written.
    case queuedTooLong(Duration)
    /// The connection closed after the request was written, before its answer came.
    case connectionClosed(String?)
    /// The server went away (GOAWAY) or reset the stream with REFUSED_STREAM before it handled
    /// it; it may be sent again safely.
    case refused
    case streamReset(HTTP2ErrorCode)
    case timedOut(Duration)
    case responseTooLarge(Int)
    case malformedResponse(String)

    /// False when FCM cannot have acted on the request (it was never written, or the server
    /// said it did not process it): sending it again cannot duplicate a notification.
    public var reachedServer: Bool {
        switch self {
        case .connectFailed, .notHTTP2, .notWritten, .refused, .queuedTooLong: false
        case .connectionClosed, .streamReset, .timedOut, .responseTooLarge, .malformedResponse: true
        }
    }

    /// The server could not be reached at all: no connection, or one lost before anything was
    /// written on it. What the send loop's circuit breaker counts.
    public var isUnreachable: Bool {
        switch self {
        case .connectFailed, .notHTTP2, .notWritten: true
        default: false
        }
    }

    /// A stream reset with REFUSED_STREAM was not processed (RFC 9113 §8.7), as one a GOAWAY refuses.
    static func reset(_ code: HTTP2ErrorCode) -> FCMTransportError {
        code == .refusedStream ? .refused : .streamReset(code)
    }

    public var description: String {
        switch self {
        case .connectFailed(let reason): "connect: \(reason)"
        case .notHTTP2(let negotiated): "the server does not speak HTTP/2 over TLS (ALPN chose \(negotiated ?? "nothing"))"
        case .notWritten(let reason): "not sent: \(reason)"
        case .queuedTooLong(let timeout): "no stream free on the connection within \(timeout)"
        case .connectionClosed(let reason): "connection closed" + (reason.map { ": \($0)" } ?? "")
        case .refused: "the server refused the stream before handling it (GOAWAY or REFUSED_STREAM)"
        case .streamReset(let code): "stream reset by the server (\(code.specName))"
        case .timedOut(let timeout): "no answer within \(timeout)"
        case .responseTooLarge(let limit): "response body over \(limit) bytes"
        case .malformedResponse(let reason): "malformed response: \(reason)"
        }
    }
}

public typealias FCMExchangeResult = Result<FCMResponse, FCMTransportError>

extension FCMExchangeResult {
    /// The server refused this request before handling it, or it was never written to a
    /// connection that then went away: it may be sent again at once, safely.
    public var wasRefused: Bool {
        switch self {
        case .failure(.refused), .failure(.notWritten): true
        default: false
        }
    }
}

/// A batch of requests for one connection: written with one flush. Each answer is reported as
/// its stream ends (`onAnswer`, on the connection's event loop), so that one slow stream holds
/// back nothing but itself; the promise completes once every stream has ended (or failed, or
/// timed out).
struct FCMBatch: Sendable {
    /// `:method`, `:scheme`, `:authority` and the regular headers every request of the batch shares.
    let authority: String
    let authorization: String
    let requests: [FCMRequest]
    let timeout: Duration
    let promise: EventLoopPromise<[FCMExchangeResult]>
    var onAnswer: (@Sendable (Int, FCMExchangeResult) -> Void)? = nil
}

/// What the connection pool may read about a connection from other threads.
final class FCMConnectionState: Sendable {
    private let usable = Atomic<Bool>(true)
    private let streamLimit = Atomic<Int>(100)

    /// False once the connection closed or the server sent GOAWAY: no new batches go to it.
    var isUsable: Bool { usable.load(ordering: .relaxed) }
    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS (100 until the server says).
    var maxConcurrentStreams: Int { streamLimit.load(ordering: .relaxed) }

    func retire() { usable.store(false, ordering: .relaxed) }
    func setMaxConcurrentStreams(_ value: Int) { streamLimit.store(value, ordering: .relaxed) }
}

/// Runs FCM requests as HTTP/2 streams directly on the connection's frames: no child channel
/// per request, one write and one flush per batch. NIOHTTP2Handler below it keeps the protocol
/// state, outbound flow control and the server's stream limit (it holds back streams beyond
/// it); this handler matches frames to requests and gives back inbound flow-control credit.
final class FCMStreamsHandler: ChannelDuplexHandler {
    typealias InboundIn = HTTP2Frame
    typealias OutboundIn = FCMBatch
    typealias OutboundOut = HTTP2Frame

    /// The most response body kept per request; FCM's answers are a few hundred bytes.
    static let maxResponseBytes = 256 * 1024
    /// The connection's receive window: HTTP/2's default, which the client never enlarges.
    private static let connectionWindow = 65_535
    /// Inbound credit is returned once this much has been consumed (half the default window).
    private static let windowUpdateThreshold = 32 * 1024

    private final class PendingBatch {
        var results: [FCMExchangeResult?]
        var remaining: Int
        let promise: EventLoopPromise<[FCMExchangeResult]>
        let onAnswer: (@Sendable (Int, FCMExchangeResult) -> Void)?
        var timeout: Scheduled<Void>?

        init(count: Int, promise: EventLoopPromise<[FCMExchangeResult]>, onAnswer: (@Sendable (Int, FCMExchangeResult) -> Void)?) {
            results = Array(repeating: nil, count: count)
            remaining = count
            self.promise = promise
            self.onAnswer = onAnswer
        }
    }

    private struct Stream {
        let batch: PendingBatch
        let index: Int
        let started: NIODeadline
        /// The request's last frame went to the socket: from here on FCM may act on it.
        var written = false
        var status: Int?
        var retryAfter: String?
        var body = ByteBuffer()
        var unacknowledgedBytes = 0
    }

    private let state: FCMConnectionState
    private var streams: [HTTP2StreamID: Stream] = [:]
    private var nextStreamID: Int32 = 1
    private var lastError: (any Error)?
    /// Set when no new stream may start here; new batches fail at once with it.
    private var closedReason: FCMTransportError?
    private var needsFlush = false
    /// Dead connections are found by PING (RFC 9113 §6.7) rather than at each request's
    /// deadline: with streams open and nothing read for `pingInterval`, a PING goes out, and a
    /// connection whose answer has not come within `pingTimeout` is closed. Counted in ticks of
    /// a fifth of the interval, on the connection's event loop.
    private let tick: TimeAmount
    private let silentTicksBeforePing: Int
    private let ticksBeforePingTimeout: Int
    private var readSinceTick = false
    private var silentTicks = 0
    private var ticksSincePing: Int?
    private var keepalive: Scheduled<Void>?

    init(state: FCMConnectionState, pingInterval: Duration = .seconds(5), pingTimeout: Duration = .seconds(5)) {
        self.state = state
        tick = TimeAmount.nanoseconds(max(TimeAmount(pingInterval).nanoseconds / 5, 1))
        silentTicksBeforePing = 5
        ticksBeforePingTimeout = max(1, Int(TimeAmount(pingTimeout).nanoseconds / tick.nanoseconds))
    }

    func handlerAdded(context: ChannelHandlerContext) {
        scheduleTick(context: context)
    }

    private func scheduleTick(context: ChannelHandlerContext) {
        keepalive = context.eventLoop.assumeIsolated().scheduleTask(in: tick) { [self] in
            checkLiveness(context: context)
            // Stopped once the connection closed (or the handler left).
            if keepalive != nil { scheduleTick(context: context) }
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        keepalive?.cancel()
        keepalive = nil
    }

    private func checkLiveness(context: ChannelHandlerContext) {
        if readSinceTick || streams.isEmpty {
            silentTicks = 0
        } else {
            silentTicks += 1
        }
        readSinceTick = false
        if let ticks = ticksSincePing {
            ticksSincePing = ticks + 1
            guard ticks + 1 >= ticksBeforePingTimeout else { return }
            if lastError == nil { lastError = UnansweredPing(timeout: tick * Int64(ticksBeforePingTimeout)) }
            state.retire()
            context.close(promise: nil)
        } else if silentTicks >= silentTicksBeforePing && context.channel.isActive {
            ticksSincePing = 0
            context.writeAndFlush(
                wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .ping(HTTP2PingData(withInteger: 0), ack: false))),
                promise: nil)
        }
    }

    // MARK: Outbound

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let request = unwrapOutboundIn(data)
        // The batch is ours from here on: its promise reports every outcome, the write's does not.
        promise?.succeed()
        guard !request.requests.isEmpty else { return request.promise.succeed([]) }
        let batch = PendingBatch(count: request.requests.count, promise: request.promise, onAnswer: request.onAnswer)
        if let closedReason {
            let error: FCMTransportError = closedReason.reachedServer ? .notWritten(closedReason.description) : closedReason
            for index in request.requests.indices { finish(batch, index, .failure(error)) }
            return
        }

        var ids: [HTTP2StreamID] = []
        ids.reserveCapacity(request.requests.count)
        for (index, fcmRequest) in request.requests.enumerated() {
            let id = HTTP2StreamID(nextStreamID)
            nextStreamID += 2
            ids.append(id)
            streams[id] = Stream(batch: batch, index: index, started: .now())
            let headers = HPACKHeaders([
                (":method", "POST"), (":scheme", "https"), (":authority", request.authority), (":path", fcmRequest.path),
                // The Admin SDKs send it: FCM then answers errors with its detailed FcmError codes,
                // which tell a dead token from a bad message.
                ("authorization", request.authorization), ("content-type", "application/json"), ("x-goog-api-format-version", "2"),
                ("content-length", String(fcmRequest.body.readableBytes)),
            ])
            context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .headers(.init(headers: headers)))), promise: nil)
            // A stream held back beyond the server's limit (or flow control) can still be dropped
            // (GOAWAY, close): the DATA frame's promise says whether it went out.
            let written = context.eventLoop.makePromise(of: Void.self)
            written.futureResult.assumeIsolated().whenComplete { [self] result in
                switch result {
                case .success: streams[id]?.written = true
                case .failure(let error): fail(id, .notWritten("\(lastError ?? error)"))
                }
            }
            context.write(
                wrapOutboundOut(HTTP2Frame(streamID: id, payload: .data(.init(data: .byteBuffer(fcmRequest.body), endStream: true)))),
                promise: written)
        }
        batch.timeout = context.eventLoop.assumeIsolated().scheduleTask(in: TimeAmount(request.timeout)) { [self] in
            for id in ids where streams[id]?.batch === batch {
                let written = streams[id]?.written ?? false
                cancel(id, written ? .timedOut(request.timeout) : .queuedTooLong(request.timeout), context: context)
            }
            context.flush()
            closeIfDrained(context: context)
        }
    }

    // MARK: Inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        readSinceTick = true
        switch frame.payload {
        case .headers(let headers):
            guard var stream = streams[frame.streamID] else { return }
            if stream.status == nil, let status = headers.headers.first(name: ":status").flatMap(Int.init), status >= 200 {
                stream.status = status
                stream.retryAfter = headers.headers.first(name: "retry-after")
            }
            streams[frame.streamID] = stream
            if headers.endStream { complete(frame.streamID) }
        case .data(let data):
            // Credit goes back after the frame is taken in: the WINDOW_UPDATE's write can deliver
            // this stream's StreamClosedEvent (END_STREAM) before the rest of this method runs.
            let length = data.data.readableBytes + (data.paddingBytes.map { $0 + 1 } ?? 0)
            defer { returnStreamCredit(length, stream: frame.streamID, endStream: data.endStream, context: context) }
            guard var stream = streams[frame.streamID] else { return }
            if case .byteBuffer(var bytes) = data.data {
                guard stream.body.readableBytes + bytes.readableBytes <= Self.maxResponseBytes else {
                    // With its status in, this is the answer, its body cut here.
                    if stream.status != nil { complete(frame.streamID) }
                    cancel(frame.streamID, .responseTooLarge(Self.maxResponseBytes), context: context)
                    needsFlush = true
                    return
                }
                // FCM's answers come in one frame: kept as received, not copied.
                if stream.body.readableBytes == 0 { stream.body = bytes } else { stream.body.writeBuffer(&bytes) }
            }
            streams[frame.streamID] = stream
            if data.endStream { complete(frame.streamID) }
        case .rstStream(let code):
            fail(frame.streamID, .reset(code))
        case .goAway(let lastStreamID, let code, _):
            // Streams above lastStreamID were never handled: NIOHTTP2Handler closes them and
            // they fail as `.refused`. Nothing new starts here; the pool opens a new connection.
            state.retire()
            closedReason = .connectionClosed("the server is going away (GOAWAY \(code.specName))")
            for id in streams.keys where id > lastStreamID { fail(id, .refused) }
        case .ping(_, ack: true):
            ticksSincePing = nil
        case .settings(.settings(let settings)):
            for setting in settings where setting.parameter == .maxConcurrentStreams {
                state.setMaxConcurrentStreams(max(1, setting.value))
            }
        default:
            break
        }
    }

    /// A connection the server is leaving is closed by us once its last stream has ended.
    private func closeIfDrained(context: ChannelHandlerContext) {
        if !state.isUsable && streams.isEmpty && context.channel.isActive { context.close(promise: nil) }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        if needsFlush {
            needsFlush = false
            context.flush()
        }
        context.fireChannelReadComplete()
        closeIfDrained(context: context)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let closed = event as? StreamClosedEvent, streams[closed.streamID] != nil {
            fail(closed.streamID, closed.reason.map { .reset($0) } ?? .malformedResponse("the stream ended without a response"))
        } else if let window = event as? NIOHTTP2WindowUpdatedEvent, window.streamID == .rootStream, let inbound = window.inboundWindowSize
        {
            restoreConnectionWindow(from: inbound, context: context)
        } else if case .handshakeCompleted(let negotiated) = event as? TLSUserEvent, negotiated != "h2" {
            closedReason = .notHTTP2(negotiated: negotiated)
            state.retire()
            context.close(promise: nil)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if let streamError = error as? NIOHTTP2Errors.StreamError {
            fail(streamError.streamID, .malformedResponse("\(streamError.baseError)"))
            return
        }
        // The first error says why; what follows our close (TLS's unclean shutdown, say) does not.
        if lastError == nil { lastError = error }
        state.retire()
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        state.retire()
        let reason = closedReason ?? .connectionClosed(lastError.map { "\($0)" })
        closedReason = reason
        for (id, stream) in streams {
            // A request that never went out cannot have been acted on, whatever closed the connection.
            fail(id, stream.written || !reason.reachedServer ? reason : .notWritten(reason.description))
        }
        keepalive?.cancel()
        keepalive = nil
        context.fireChannelInactive()
    }

    // MARK: Streams

    private func complete(_ id: HTTP2StreamID) {
        guard let stream = streams.removeValue(forKey: id) else { return }
        guard let status = stream.status else {
            finish(stream.batch, stream.index, .failure(.malformedResponse("no :status")))
            return
        }
        let elapsed = NIODeadline.now() - stream.started
        finish(
            stream.batch, stream.index,
            .success(
                FCMResponse(
                    status: status, body: stream.body, retryAfter: stream.retryAfter,
                    elapsed: .nanoseconds(elapsed.nanoseconds))))
    }

    /// Fails a stream we give up on and tells the server with RST_STREAM(CANCEL); the caller
    /// flushes. DATA still coming for it is dropped by NIOHTTP2, and its window given back by
    /// `restoreConnectionWindow`.
    private func cancel(_ id: HTTP2StreamID, _ error: FCMTransportError, context: ChannelHandlerContext) {
        fail(id, error)
        context.write(wrapOutboundOut(HTTP2Frame(streamID: id, payload: .rstStream(.cancel))), promise: nil)
    }

    private func fail(_ id: HTTP2StreamID, _ error: FCMTransportError) {
        guard let stream = streams.removeValue(forKey: id) else { return }
        finish(stream.batch, stream.index, .failure(error))
    }

    private func finish(_ batch: PendingBatch, _ index: Int, _ result: FCMExchangeResult) {
        batch.results[index] = result
        batch.onAnswer?(index, result)
        batch.remaining -= 1
        if batch.remaining == 0 {
            batch.timeout?.cancel()
            batch.promise.succeed(batch.results.map { $0! })
        }
    }

    /// Gives the server back the connection window its DATA used, once half of it is used:
    /// without it the connection stalls after 64 KiB. NIOHTTP2Handler reports the window after
    /// every frame, DATA it drops itself included (a reset stream's, which never reaches this
    /// handler): counting only the DATA handed on would lose that window for good, and the
    /// connection's other answers would stall behind it. NIOHTTP2's own stream multiplexer
    /// keeps the connection window the same way.
    private func restoreConnectionWindow(from window: Int, context: ChannelHandlerContext) {
        let used = Self.connectionWindow - window
        guard used >= Self.windowUpdateThreshold else { return }
        context.write(wrapOutboundOut(HTTP2Frame(streamID: .rootStream, payload: .windowUpdate(windowSizeIncrement: used))), promise: nil)
        needsFlush = true
    }

    /// Gives the server back a stream's window as its DATA is taken in, once half a default
    /// window has been consumed: an answer larger than 64 KiB would stall without it.
    private func returnStreamCredit(_ length: Int, stream id: HTTP2StreamID, endStream: Bool, context: ChannelHandlerContext) {
        guard length > 0, !endStream, var stream = streams[id] else { return }
        stream.unacknowledgedBytes += length
        if stream.unacknowledgedBytes >= Self.windowUpdateThreshold {
            context.write(
                wrapOutboundOut(HTTP2Frame(streamID: id, payload: .windowUpdate(windowSizeIncrement: stream.unacknowledgedBytes))),
                promise: nil)
            stream.unacknowledgedBytes = 0
            needsFlush = true
        }
        streams[id] = stream
    }
}

/// Why a connection was closed by us: it stopped answering.
private struct UnansweredPing: Error, CustomStringConvertible {
    let timeout: TimeAmount
    var description: String { "no answer to PING within \(timeout.nanoseconds / 1_000_000) ms" }
}

extension HTTP2ErrorCode {
    /// The name RFC 9113 §7 gives the code, as delivery logs and server logs show it.
    var specName: String {
        let names = [
            "NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT", "STREAM_CLOSED",
            "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR", "CONNECT_ERROR", "ENHANCE_YOUR_CALM",
            "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED",
        ]
        return networkCode < names.count ? names[networkCode] : "error 0x\(String(networkCode, radix: 16))"
    }
}
