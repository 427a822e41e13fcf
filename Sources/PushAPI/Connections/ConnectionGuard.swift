import Logging
import NIOCore
import NIOHTTPTypes

/// One per connection, right after HTTP decoding: registers the connection with
/// ``OpenConnections`` (which may close it, or another, at the cap) and closes it when a request
/// does not arrive whole within the read timeout. The clock starts at a request's first byte,
/// or for a new connection's first request when the connection is accepted, so neither a
/// slow trickle of headers nor of body keeps a connection open, however steady it is.
/// Hummingbird's own idle timeout closes kept-alive connections that send nothing.
///
/// NIO and Hummingbird have no such timeout: their idle timers restart on every read, and a byte
/// every few seconds is a read.
final class ConnectionGuard: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundIn = HTTPResponsePart
    typealias OutboundOut = HTTPResponsePart

    private let connections: OpenConnections
    private let readTimeout: TimeAmount
    private let logger: Logger
    private var admitted = false
    /// Set while a request is partly received (or a new connection has sent none yet).
    private var readDeadline: Scheduled<Void>?
    /// The bytes of the socket read being delivered completed a request.
    private var requestEndedInThisRead = false
    /// Heads read and not yet answered (more than one when a client pipelines).
    private var requestsBeingAnswered = 0

    init(connections: OpenConnections, readTimeout: TimeAmount, logger: Logger) {
        self.connections = connections
        self.readTimeout = readTimeout
        self.logger = logger
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { admit(context: context) }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        cancelReadDeadline()
    }

    func channelActive(context: ChannelHandlerContext) {
        admit(context: context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        cancelReadDeadline()
        if admitted { connections.closed(context.channel) }
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head:
            requestsBeingAnswered += 1
            if requestsBeingAnswered == 1 { connections.requestStarted(context.channel) }
        case .body:
            break
        case .end:
            cancelReadDeadline()
            requestEndedInThisRead = true
        }
        context.fireChannelRead(data)
    }

    /// Fired after every socket read, also one that gave the decoder too little for a part: the
    /// only sign here that a request's first bytes came.
    func channelReadComplete(context: ChannelHandlerContext) {
        if !requestEndedInThisRead && readDeadline == nil { startReadDeadline(context: context) }
        requestEndedInThisRead = false
        context.fireChannelReadComplete()
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        // An answer to an unparsable request (Hummingbird's 400) had no head.
        if case .end = unwrapOutboundIn(data), requestsBeingAnswered > 0 {
            requestsBeingAnswered -= 1
            if requestsBeingAnswered == 0 { connections.requestAnswered(context.channel) }
        }
        context.write(data, promise: promise)
    }

    private func admit(context: ChannelHandlerContext) {
        guard !admitted else { return }
        admitted = true
        switch connections.admit(context.channel) {
        case .refused:
            logger.debug(
                "connection closed: every open connection has a request being answered",
                metadata: ["limit": "\(connections.limit)"])
            context.close(promise: nil)
        case .admitted(let evicted):
            if let evicted {
                logger.debug("connection closed to make room for a new one", metadata: ["limit": "\(connections.limit)"])
                evicted.close(promise: nil)
            }
            startReadDeadline(context: context)
        }
    }

    private func startReadDeadline(context: ChannelHandlerContext) {
        readDeadline = context.eventLoop.assumeIsolated().scheduleTask(in: readTimeout) { [self] in
            readDeadline = nil
            logger.debug(
                "connection closed: request not received within the read timeout",
                metadata: ["seconds": "\(readTimeout.nanoseconds / 1_000_000_000)"])
            context.close(promise: nil)
        }
    }

    private func cancelReadDeadline() {
        readDeadline?.cancel()
        readDeadline = nil
    }
}
