import NIOCore
import NIOEmbedded
import NIOHPACK
import NIOHTTP2
import NIOTLS
import Testing

@testable import FCMTransport

/// The frame-level half of the FCM client, driven frame by frame: what it writes for a batch,
/// how it matches answers, resets, GOAWAY, timeouts and closes to requests, and the
/// flow-control credit it returns.
@Suite("FCM streams on one HTTP/2 connection")
struct FCMStreamsHandlerTests {
    final class Harness {
        let state = FCMConnectionState()
        let loop = EmbeddedEventLoop()
        let channel: EmbeddedChannel

        init(
            holdingWrites: HoldingWrites? = nil, closingLater: ClosingLater? = nil, pingInterval: Duration = .seconds(5),
            pingTimeout: Duration = .seconds(5)
        ) throws {
            channel = EmbeddedChannel(loop: loop)
            if let holdingWrites { try channel.pipeline.syncOperations.addHandler(holdingWrites) }
            if let closingLater { try channel.pipeline.syncOperations.addHandler(closingLater) }
            try channel.pipeline.syncOperations.addHandler(
                FCMStreamsHandler(state: state, pingInterval: pingInterval, pingTimeout: pingTimeout))
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 443)).wait()
        }

        /// Writes a batch of `count` requests; the future answers them all.
        func send(_ count: Int, timeout: Duration = .seconds(10)) throws -> EventLoopFuture<[FCMExchangeResult]> {
            let promise = loop.makePromise(of: [FCMExchangeResult].self)
            let requests = (0..<count).map { FCMRequest(path: "/v1/projects/p/messages:send", body: ByteBuffer(string: "{\"n\":\($0)}")) }
            try channel.writeOutbound(
                FCMBatch(
                    authority: "fcm.example:8443", authorization: "Bearer at-1", requests: requests,
                    timeout: timeout, promise: promise))
            return promise.futureResult
        }

        func written() throws -> [HTTP2Frame] {
            var frames: [HTTP2Frame] = []
            while let frame = try channel.readOutbound(as: HTTP2Frame.self) { frames.append(frame) }
            return frames
        }

        func answer(_ stream: HTTP2StreamID, status: Int, body: String, headers extra: [(String, String)] = []) throws {
            try channel.writeInbound(
                HTTP2Frame(streamID: stream, payload: .headers(.init(headers: HPACKHeaders([(":status", "\(status)")] + extra)))))
            try channel.writeInbound(
                HTTP2Frame(streamID: stream, payload: .data(.init(data: .byteBuffer(ByteBuffer(string: body)), endStream: true))))
        }

        /// The connection-level WINDOW_UPDATE increments written since the last look.
        func connectionCredit() throws -> [Int] {
            try written().compactMap { frame in
                if case .windowUpdate(let increment) = frame.payload, frame.streamID == .rootStream { increment } else { nil }
            }
        }

        static func results(_ future: EventLoopFuture<[FCMExchangeResult]>) -> [FCMExchangeResult]? {
            var value: [FCMExchangeResult]?
            future.assumeIsolated().whenSuccess { value = $0 }
            return value
        }
    }

    @Test func aBatchIsOneStreamPerRequestWithFCMHeadersAndAnswersMatchTheirStreams() throws {
        let harness = try Harness()
        let answers = try harness.send(2)
        let frames = try harness.written()
        #expect(frames.map(\.streamID) == [1, 1, 3, 3])
        guard case .headers(let headers) = frames[0].payload, case .data(let data) = frames[1].payload else {
            Issue.record("expected HEADERS then DATA, got \(frames)")
            return
        }
        #expect(headers.headers[":method"] == ["POST"] && headers.headers[":scheme"] == ["https"])
        #expect(headers.headers[":authority"] == ["fcm.example:8443"] && headers.headers[":path"] == ["/v1/projects/p/messages:send"])
        #expect(headers.headers["authorization"] == ["Bearer at-1"] && headers.headers["content-type"] == ["application/json"])
        #expect(headers.headers["x-goog-api-format-version"] == ["2"])
        #expect(headers.headers["content-length"] == ["7"] && !headers.endStream && data.endStream)
        // Answers arrive in any order; the second one first.
        try harness.answer(3, status: 429, body: "{\"error\":{}}", headers: [("retry-after", "30")])
        #expect(Harness.results(answers) == nil)
        try harness.answer(1, status: 200, body: "{\"name\":\"projects/p/messages/1\"}")
        let results = try #require(Harness.results(answers))
        let first = try results[0].get()
        let second = try results[1].get()
        #expect(first.status == 200 && String(buffer: first.body) == "{\"name\":\"projects/p/messages/1\"}" && first.retryAfter == nil)
        #expect(second.status == 429 && second.retryAfter == "30")
        // The next batch continues the stream ids.
        _ = try harness.send(1)
        #expect(try harness.written().map(\.streamID) == [5, 5])
    }

    @Test func resetsGoAwayAndACloseFailEachStreamAsTransportErrors() throws {
        let harness = try Harness()
        let answers = try harness.send(4)
        _ = try harness.written()
        try harness.channel.writeInbound(HTTP2Frame(streamID: 1, payload: .rstStream(.internalError)))
        // REFUSED_STREAM: never handled (RFC 9113 §8.7), as a stream above a GOAWAY's last id.
        try harness.channel.writeInbound(HTTP2Frame(streamID: 3, payload: .rstStream(.refusedStream)))
        // GOAWAY: stream 5 was handled (its answer may still come), 7 never was.
        try harness.channel.writeInbound(
            HTTP2Frame(streamID: .rootStream, payload: .goAway(lastStreamID: 5, errorCode: .noError, opaqueData: nil)))
        #expect(!harness.state.isUsable)
        // Nothing new starts on a connection that is going away.
        let late = try #require(Harness.results(try harness.send(1)))
        #expect(late[0].failureDescription == "not sent: connection closed: the server is going away (GOAWAY NO_ERROR)")
        #expect(late[0].wasRefused)
        #expect(try harness.written().isEmpty)
        #expect(harness.channel.isActive)
        try harness.answer(5, status: 200, body: "{}")
        let results = try #require(Harness.results(answers))
        #expect(results[0].failureDescription == "stream reset by the server (INTERNAL_ERROR)")
        #expect(results.map(\.wasRefused) == [false, true, false, true])
        #expect((try? results[2].get())?.status == 200)
        #expect(results[3].failureDescription == "the server refused the stream before handling it (GOAWAY or REFUSED_STREAM)")
        // Its last stream has ended: the connection is closed, not left open.
        #expect(!harness.channel.isActive)

        // A connection error (TLS, say) ends every stream with its text: the first error's, not
        // what the close it causes brings (the peer then drops TCP without TLS's close_notify).
        struct BrokenRecord: Error, CustomStringConvertible { var description: String { "bad record MAC" } }
        struct UncleanShutdown: Error, CustomStringConvertible { var description: String { "uncleanShutdown" } }
        let goodbye = ClosingLater()
        let broken = try Harness(closingLater: goodbye)
        let cut = try broken.send(1)
        broken.channel.pipeline.fireErrorCaught(BrokenRecord())
        broken.channel.pipeline.fireErrorCaught(UncleanShutdown())
        #expect(Harness.results(cut) == nil && goodbye.requested)
        try broken.channel.pipeline.syncOperations.removeHandler(goodbye).wait()
        _ = try broken.channel.finish()
        #expect(try #require(Harness.results(cut))[0].failureDescription == "connection closed: bad record MAC")

        let closing = try Harness()
        let pending = try closing.send(2)
        try closing.answer(1, status: 200, body: "{}")
        _ = try closing.channel.finish()
        let closed = try #require(Harness.results(pending))
        #expect((try? closed[0].get())?.status == 200)
        #expect(closed[1].failureDescription == "connection closed")
        #expect(!closing.state.isUsable)
    }

    @Test func unansweredStreamsTimeOutAndAreCancelled() throws {
        let harness = try Harness()
        let answers = try harness.send(2, timeout: .seconds(2))
        _ = try harness.written()
        try harness.answer(1, status: 200, body: "{}")
        harness.loop.advanceTime(by: .milliseconds(1999))
        #expect(Harness.results(answers) == nil)
        harness.loop.advanceTime(by: .milliseconds(1))
        let results = try #require(Harness.results(answers))
        #expect((try? results[0].get())?.status == 200)
        #expect(results[1].failureDescription == "no answer within 2.0 seconds")
        let frames = try harness.written()
        #expect(frames.count == 1 && frames[0].streamID == 3)
        if case .rstStream(let code) = frames.first?.payload { #expect(code == .cancel) } else { Issue.record("no RST_STREAM: \(frames)") }
        // A late answer's window comes back (see the oversized answer below): the connection
        // stays in use.
        #expect(harness.state.isUsable)
        #expect(harness.channel.isActive)
    }

    /// An answer over the size limit is the answer its status says, its body cut; the rest is
    /// not read (RST_STREAM). NIOHTTP2Handler drops the DATA still on its way without handing
    /// it on, but reports the connection window that DATA used, and that window is given back:
    /// the connection's other answers keep coming. Found against nginx: after one 1 MB answer,
    /// every later answer on the connection timed out, and each send was made again.
    @Test func anOversizedAnswerIsItsStatusAndTheDataDroppedAfterItIsCredited() throws {
        let harness = try Harness()
        let answers = try harness.send(2)
        _ = try harness.written()
        try harness.channel.writeInbound(HTTP2Frame(streamID: 1, payload: .headers(.init(headers: [":status": "503"]))))
        for _ in 0..<5 {
            try harness.channel.writeInbound(
                HTTP2Frame(streamID: 1, payload: .data(.init(data: .byteBuffer(ByteBuffer(repeating: 0x61, count: 60 * 1024))))))
        }
        let resets = try harness.written().filter { if case .rstStream(.cancel) = $0.payload { $0.streamID == 1 } else { false } }
        #expect(resets.count == 1)
        // 50 KiB more of it arrive and are dropped below; NIOHTTP2Handler reports the window.
        harness.channel.pipeline.fireUserInboundEventTriggered(
            NIOHTTP2WindowUpdatedEvent(streamID: .rootStream, inboundWindowSize: 65_535 - 50 * 1024, outboundWindowSize: 65_535))
        harness.channel.pipeline.fireChannelReadComplete()
        #expect(try harness.connectionCredit() == [50 * 1024])
        #expect(harness.state.isUsable && harness.channel.isActive)
        try harness.answer(3, status: 200, body: #"{"name":"projects/p/messages/1"}"#)
        let results = try #require(Harness.results(answers))
        let cut = try results[0].get()
        #expect(cut.status == 503 && cut.body.readableBytes <= 256 * 1024 && cut.body.readableBytes >= 240 * 1024)
        #expect((try? results[1].get())?.status == 200)
    }

    /// Keeps every write's promise pending, as a connection whose TLS handshake has not finished does.
    final class HoldingWrites: ChannelOutboundHandler {
        typealias OutboundIn = HTTP2Frame
        var held: [EventLoopPromise<Void>] = []
        func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
            if let promise { held.append(promise) }
        }
    }

    /// Takes in a close without passing it on, as a TLS connection that first says goodbye does.
    final class ClosingLater: ChannelOutboundHandler, RemovableChannelHandler {
        typealias OutboundIn = HTTP2Frame
        var requested = false
        func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
            requested = true
            promise?.succeed()
        }
    }

    @Test func requestsNeverWrittenAreNotSentAndWrittenOnesAreAmbiguous() throws {
        let holding = HoldingWrites()
        let harness = try Harness(holdingWrites: holding)
        let answers = try harness.send(2)
        // The first request went out; the connection dies before the second did.
        holding.held[0].succeed()
        _ = try harness.channel.finish()
        let results = try #require(Harness.results(answers))
        #expect(results[0].failureDescription == "connection closed")
        #expect(results[1].failureDescription?.hasPrefix("not sent: ") == true)
        let errors = results.compactMap { if case .failure(let error) = $0 { error } else { nil } }
        #expect(errors.map(\.reachedServer) == [true, false])
        #expect(errors.map(\.isUnreachable) == [false, true])
        #expect(results.map(\.wasRefused) == [false, true])
        for promise in holding.held.dropFirst() { promise.fail(ChannelError.ioOnClosedChannel) }

        // One waiting for a stream past its deadline was never written either, but says nothing
        // about FCM's reachability.
        let queue = HoldingWrites()
        let waiting = try Harness(holdingWrites: queue)
        let late = try waiting.send(1, timeout: .seconds(1))
        waiting.loop.advanceTime(by: .seconds(1))
        for promise in queue.held { promise.fail(ChannelError.ioOnClosedChannel) }
        let expired = try #require(Harness.results(late))
        #expect(expired[0].failureDescription == "no stream free on the connection within 1.0 seconds")
        if case .failure(let error) = expired[0] { #expect(!error.reachedServer && !error.isUnreachable) }
    }

    @Test func aSilentConnectionIsPingedAndClosedWhenThePingGoesUnanswered() throws {
        let harness = try Harness(pingInterval: .seconds(1), pingTimeout: .seconds(2))
        // Idle, nothing is pinged.
        harness.loop.advanceTime(by: .seconds(3))
        #expect(try harness.written().isEmpty)
        let answers = try harness.send(2)
        _ = try harness.written()
        harness.loop.advanceTime(by: .milliseconds(999))
        #expect(try harness.written().isEmpty)
        harness.loop.advanceTime(by: .milliseconds(1))
        let ping = try harness.written()
        guard ping.count == 1, case .ping(_, ack: false) = ping[0].payload else {
            Issue.record("expected one PING, got \(ping)")
            return
        }
        // Answered: the connection lives on, and is pinged again after another silent second.
        try harness.channel.writeInbound(HTTP2Frame(streamID: .rootStream, payload: .ping(HTTP2PingData(withInteger: 0), ack: true)))
        harness.loop.advanceTime(by: .seconds(1))
        #expect(harness.channel.isActive)
        harness.loop.advanceTime(by: .milliseconds(200))
        #expect(try harness.written().count == 1)
        // Unanswered for two seconds: closed, and its written streams end without an answer.
        harness.loop.advanceTime(by: .milliseconds(1800))
        #expect(Harness.results(answers) == nil)
        harness.loop.advanceTime(by: .milliseconds(200))
        #expect(!harness.channel.isActive && !harness.state.isUsable)
        let results = try #require(Harness.results(answers))
        #expect(results.map(\.failureDescription) == Array(repeating: "connection closed: no answer to PING within 2000 ms", count: 2))
    }

    @Test func theServersStreamLimitIsReadAndInboundCreditIsReturned() throws {
        let harness = try Harness()
        #expect(harness.state.maxConcurrentStreams == 100)
        try harness.channel.writeInbound(
            HTTP2Frame(streamID: .rootStream, payload: .settings(.settings([HTTP2Setting(parameter: .maxConcurrentStreams, value: 7)]))))
        #expect(harness.state.maxConcurrentStreams == 7)

        // The connection's credit follows the window NIOHTTP2Handler reports after each frame:
        // nothing while less than half of it is used, then all that is used, once.
        for used in [1024, 20 * 1024, 32 * 1024 - 1] {
            harness.channel.pipeline.fireUserInboundEventTriggered(
                NIOHTTP2WindowUpdatedEvent(streamID: .rootStream, inboundWindowSize: 65_535 - used, outboundWindowSize: 65_535))
        }
        harness.channel.pipeline.fireChannelReadComplete()
        #expect(try harness.connectionCredit() == [])
        harness.channel.pipeline.fireUserInboundEventTriggered(
            NIOHTTP2WindowUpdatedEvent(streamID: .rootStream, inboundWindowSize: 65_535 - 40 * 1024, outboundWindowSize: 65_535))
        harness.channel.pipeline.fireChannelReadComplete()
        #expect(try harness.connectionCredit() == [40 * 1024])

        // One large answer: its stream gets credit too while its body is still coming.
        let large = try harness.send(1)
        _ = try harness.written()
        try harness.channel.writeInbound(HTTP2Frame(streamID: 1, payload: .headers(.init(headers: [":status": "500"]))))
        try harness.channel.writeInbound(
            HTTP2Frame(streamID: 1, payload: .data(.init(data: .byteBuffer(ByteBuffer(repeating: 0x61, count: 40 * 1024))))))
        let streamUpdates = try harness.written().filter { $0.streamID == 1 }
        #expect(streamUpdates.count == 1)
        try harness.channel.writeInbound(HTTP2Frame(streamID: 1, payload: .data(.init(data: .byteBuffer(ByteBuffer()), endStream: true))))
        #expect((try? Harness.results(large)?[0].get())?.body.readableBytes == 40 * 1024)
    }

    @Test func aServerThatDoesNotChooseHTTP2IsLeftWithAClearReason() throws {
        let harness = try Harness()
        harness.channel.pipeline.fireUserInboundEventTriggered(TLSUserEvent.handshakeCompleted(negotiatedProtocol: "http/1.1"))
        #expect(!harness.state.isUsable)
        let results = try #require(Harness.results(try harness.send(1)))
        #expect(results[0].failureDescription == "the server does not speak HTTP/2 over TLS (ALPN chose http/1.1)")
    }

    @Test func endpointsAreHTTPSURLsWithOptionalPortAndPath() {
        let google = FCMEndpoint("https://fcm.googleapis.com")
        #expect(google?.host == "fcm.googleapis.com" && google?.port == 443 && google?.pathPrefix == "")
        #expect(google?.authority == "fcm.googleapis.com")
        #expect(FCMEndpoint("https://127.0.0.1:8443/")?.authority == "127.0.0.1:8443")
        #expect(FCMEndpoint("https://proxy.internal/fcm/")?.pathPrefix == "/fcm")
        #expect(FCMEndpoint("https://[::1]:8443")?.host == "::1")
        #expect(FCMEndpoint("https://[::1]:8443")?.authority == "[::1]:8443")
        #expect(FCMEndpoint("http://fcm.googleapis.com") == nil)
        #expect(FCMEndpoint("fcm.googleapis.com") == nil)
    }
}

extension Result where Failure == FCMTransportError {
    var failureDescription: String? {
        if case .failure(let error) = self { error.description } else { nil }
    }
}
