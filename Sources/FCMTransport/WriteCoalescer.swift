import NIOCore

/// Gathers what is written between two flushes into one buffer, below the TLS handler.
/// NIOHTTP2Handler writes a request as three buffers (HEADERS, the DATA frame's header, its
/// payload) and NIOSSLHandler seals each write as a TLS record of its own: three records per
/// request to encrypt here and decrypt at FCM, where one record per 16 KiB does.
final class WriteCoalescer: ChannelOutboundHandler {
    typealias OutboundIn = IOData
    typealias OutboundOut = IOData

    /// Writes at least this large go through as they are: a copy would gain nothing.
    static let passThroughBytes = 16 * 1024

    private var pending = ByteBuffer()
    private var pendingWrites = 0
    private var promises: [EventLoopPromise<Void>] = []

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard case .byteBuffer(var buffer) = unwrapOutboundIn(data), buffer.readableBytes < Self.passThroughBytes else {
            writePending(context: context)
            context.write(data, promise: promise)
            return
        }
        if pendingWrites == 0 { pending = context.channel.allocator.buffer(capacity: 4096) }
        pending.writeBuffer(&buffer)
        pendingWrites += 1
        if let promise { promises.append(promise) }
    }

    func flush(context: ChannelHandlerContext) {
        writePending(context: context)
        context.flush()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        pendingWrites = 0
        pending = ByteBuffer()
        let failed = promises
        promises = []
        for promise in failed { promise.fail(ChannelError.ioOnClosedChannel) }
    }

    private func writePending(context: ChannelHandlerContext) {
        guard pendingWrites > 0 else { return }
        let buffer = pending
        pending = ByteBuffer()
        pendingWrites = 0
        let promise: EventLoopPromise<Void>?
        switch promises.count {
        case 0:
            promise = nil
        case 1:
            promise = promises[0]
        default:
            let gathered = promises
            let written = context.eventLoop.makePromise(of: Void.self)
            written.futureResult.whenComplete { result in
                for promise in gathered { promise.completeWith(result) }
            }
            promise = written
        }
        promises.removeAll(keepingCapacity: true)
        context.write(wrapOutboundOut(.byteBuffer(buffer)), promise: promise)
    }
}
