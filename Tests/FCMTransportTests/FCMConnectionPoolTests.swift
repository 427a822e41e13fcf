import FCMEmulator
import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization
import Testing

@testable import FCMTransport

/// The pool against a real HTTP/2 + TLS server (fcm-emulator), through a TCP relay that can go
/// silent as a dead network does.
@Suite("FCM connection pool")
struct FCMConnectionPoolTests {
    /// A TCP relay to `port` on loopback; once `silent`, it passes nothing on in either direction
    /// and closes nothing, as a network that died under the connections.
    final class SilentRelay: Sendable {
        final class Silence: Sendable {
            private let on = Atomic<Bool>(false)
            var isOn: Bool { on.load(ordering: .relaxed) }
            func begin() { on.store(true, ordering: .relaxed) }
        }

        let silence = Silence()
        let channel: Channel
        /// Both sides of every relayed connection, to close at the end.
        final class Relayed: Sendable {
            private let channels = Mutex<[Channel]>([])
            var all: [Channel] { channels.withLock { $0 } }
            func add(_ added: [Channel]) { channels.withLock { $0 += added } }
        }

        let relayed = Relayed()

        init(to port: Int) async throws {
            let silence = self.silence
            let relayed = self.relayed
            channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                // Nothing is read from the client before the way on is there to pass it on.
                .childChannelOption(.autoRead, value: false)
                .childChannelInitializer { inbound in
                    ClientBootstrap(group: inbound.eventLoop)
                        .channelInitializer { outbound in
                            outbound.eventLoop.makeCompletedFuture {
                                try outbound.pipeline.syncOperations.addHandler(Pass(to: inbound, unless: silence))
                            }
                        }
                        .connect(host: "127.0.0.1", port: port)
                        .flatMapThrowing { outbound in
                            relayed.add([inbound, outbound])
                            try inbound.pipeline.syncOperations.addHandler(Pass(to: outbound, unless: silence))
                            try inbound.syncOptions?.setOption(.autoRead, value: true)
                        }
                }
                .bind(host: "127.0.0.1", port: 0).get()
        }

        var port: Int { channel.localAddress?.port ?? 0 }

        func close() async throws {
            for channel in relayed.all { try? await channel.close() }
            try await channel.close()
        }

        /// Writes what one side reads to the other, closing it when this one closes.
        final class Pass: ChannelInboundHandler, Sendable {
            typealias InboundIn = ByteBuffer
            let other: Channel
            let silence: Silence

            init(to other: Channel, unless silence: Silence) {
                self.other = other
                self.silence = silence
            }

            func channelRead(context: ChannelHandlerContext, data: NIOAny) {
                guard !silence.isOn else { return }
                other.writeAndFlush(unwrapInboundIn(data), promise: nil)
            }

            func channelInactive(context: ChannelHandlerContext) {
                if !silence.isOn { other.close(promise: nil) }
            }
        }
    }

    /// A worker stopping closes its FCM connections; on a network gone silent no server answers
    /// TLS's close_notify. The connections close together and do not wait for it long: three
    /// took 15 s, one after another at NIOSSL's 5 s each, before; four one after another at
    /// half a second each would take 2 s.
    @Test func connectionsCloseTogetherWithoutWaitingLongForASilentServer() async throws {
        try await FCMEmulator.withRunning(.init(maxConcurrentStreams: 100)) { emulator in
            let relay = try await SilentRelay(to: emulator.port)
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMBytes(Array(try #require(emulator.caCertificatePEM).utf8)))
            let pool = try FCMConnectionPool(
                endpoint: try #require(FCMEndpoint("https://127.0.0.1:\(relay.port)")), concurrency: 400, tlsConfiguration: tls)
            // 400 requests at once need four connections of 100 streams; each is answered (401:
            // no access token), so the connections are up, TLS and all.
            let answered = Mutex(0)
            let requests = (0..<400).map { _ in FCMRequest(path: "/v1/projects/p/messages:send", body: ByteBuffer(string: "{}")) }
            await pool.execute(requests, authorization: "Bearer none", timeout: .seconds(10)) { _, result in
                if case .success = result { answered.withLock { $0 += 1 } }
            }
            #expect(answered.withLock { $0 } == 400)
            relay.silence.begin()
            let started = ContinuousClock.now
            await pool.close()
            let took = ContinuousClock.now - started
            #expect(took < .milliseconds(1500), "closing took \(took)")
            try await relay.close()
        }
    }
}
