import NIOCore
import NIOEmbedded
import Testing

@testable import FCMTransport

/// What reaches the TLS handler: one buffer per flush, in the order written, every write's
/// promise kept.
@Suite("Write coalescing below TLS")
struct WriteCoalescerTests {
    private func channel() throws -> EmbeddedChannel {
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(WriteCoalescer())
        return channel
    }

    private func outbound(_ channel: EmbeddedChannel) throws -> [ByteBuffer] {
        var buffers: [ByteBuffer] = []
        while let buffer = try channel.readOutbound(as: ByteBuffer.self) { buffers.append(buffer) }
        return buffers
    }

    @Test func writesBetweenFlushesLeaveAsOneBufferAndEveryPromiseSucceeds() throws {
        let channel = try channel()
        var succeeded: [Int] = []
        for (index, part) in ["HEADERS|", "DATA-HEADER|", "{\"message\":{}}"].enumerated() {
            let promise = channel.eventLoop.makePromise(of: Void.self)
            promise.futureResult.assumeIsolated().whenSuccess { succeeded.append(index) }
            channel.write(ByteBuffer(string: part), promise: promise)
        }
        #expect(try outbound(channel).isEmpty, "nothing goes out before the flush")
        channel.flush()
        #expect(try outbound(channel).map { String(buffer: $0) } == ["HEADERS|DATA-HEADER|{\"message\":{}}"])
        #expect(succeeded == [0, 1, 2])

        channel.write(ByteBuffer(string: "next"), promise: nil)
        channel.flush()
        #expect(try outbound(channel).map { String(buffer: $0) } == ["next"])
        #expect(try channel.finish().isClean)
    }

    @Test func aLargeWriteKeepsItsPlaceAfterTheGatheredOnes() throws {
        let channel = try channel()
        let large = String(repeating: "x", count: WriteCoalescer.passThroughBytes)
        channel.write(ByteBuffer(string: "a"), promise: nil)
        channel.write(ByteBuffer(string: "b"), promise: nil)
        channel.write(ByteBuffer(string: large), promise: nil)
        channel.write(ByteBuffer(string: "c"), promise: nil)
        channel.flush()
        #expect(try outbound(channel).map { String(buffer: $0) } == ["ab", large, "c"])
        #expect(try channel.finish().isClean)
    }

    @Test func writesNotYetFlushedFailWhenTheConnectionCloses() throws {
        let channel = try channel()
        let promise = channel.eventLoop.makePromise(of: Void.self)
        var failure: (any Error)?
        promise.futureResult.assumeIsolated().whenFailure { failure = $0 }
        channel.write(ByteBuffer(string: "never flushed"), promise: promise)
        _ = try channel.finish()
        #expect(failure as? ChannelError == .ioOnClosedChannel)
    }
}
