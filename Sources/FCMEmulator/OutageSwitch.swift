import NIOCore
import Synchronization

/// Outages, as when the network path to FCM is lost: beginning one cuts every open connection at
/// once (no GOAWAY, no TLS close_notify, no answers to requests in flight: the socket is reset),
/// and until it ends every new connection is reset as soon as it is accepted, before TLS.
final class OutageSwitch: Sendable {
    /// Why a connection accepted during an outage was never served.
    struct Refused: Error {}

    private struct State {
        var endsAt: ContinuousClock.Instant?
        /// Connections an outage would cut, until they close.
        var open: [ObjectIdentifier: any Channel] = [:]
    }

    private let state = Mutex(State())
    /// HTTP/1.1 requests being answered, on every connection: an outage drops them all.
    private let http1RequestsInFlight = Atomic(0)
    private let ledger: DeliveryLedger

    init(ledger: DeliveryLedger) {
        self.ledger = ledger
    }

    /// Registers a connection just accepted, to be cut by the next outage; false (and counted)
    /// during an outage, when the caller must reset it instead.
    func admit(_ channel: any Channel) -> Bool {
        let id = ObjectIdentifier(channel)
        let admitted = state.withLock { state in
            if let endsAt = state.endsAt, ContinuousClock.now < endsAt { return false }
            state.open[id] = channel
            return true
        }
        guard admitted else {
            ledger.recordOutageRefusedConnection()
            return false
        }
        channel.closeFuture.whenComplete { [self] _ in
            state.withLock { $0.open[id] = nil }
        }
        return true
    }

    /// Cuts every open connection and refuses new ones for `duration` (zero or less: only cuts).
    /// During an outage, a new one sets the end anew.
    func begin(for duration: Duration) {
        let connections = state.withLock { state in
            state.endsAt = ContinuousClock.now.advanced(by: duration)
            return Array(state.open.values)
        }
        ledger.recordOutageDroppedStreams(http1RequestsInFlight.load(ordering: .relaxed))
        for connection in connections {
            connection.pipeline.fireUserInboundEventTriggered(OutageCutter.Cut())
        }
    }

    func end() {
        state.withLock { $0.endsAt = nil }
    }

    func http1RequestStarted() {
        http1RequestsInFlight.add(1, ordering: .relaxed)
    }

    func http1RequestEnded() {
        http1RequestsInFlight.subtract(1, ordering: .relaxed)
    }
}

/// First in every connection's pipeline, below TLS: on ``Cut`` it lets the handlers above count
/// what the connection drops, then resets the socket. Closing from the pipeline's end would go
/// through NIOSSLHandler, which ends TLS gracefully first.
final class OutageCutter: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer

    struct Cut: Sendable {}

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        context.fireUserInboundEventTriggered(event)
        if event is Cut {
            Self.setResetOnClose(context.channel)
            context.close(promise: nil)
        }
    }

    /// Closes a channel that has no handlers yet with a reset. Called on its event loop.
    static func reset(_ channel: any Channel) {
        setResetOnClose(channel)
        channel.close(promise: nil)
    }

    /// SO_LINGER 0: the close sends RST and discards what was not sent yet, as a lost path does.
    private static func setResetOnClose(_ channel: any Channel) {
        _ = (channel as? any SocketOptionProvider)?.setSoLinger(NIOLinger(l_onoff: 1, l_linger: 0))
    }
}
