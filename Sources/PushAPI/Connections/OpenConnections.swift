import Logging
import NIOCore
import Synchronization

/// Every client connection push-api has open, and the cap on them. At the cap, a new connection
/// is accepted and the connection that has waited longest without a request being answered (an
/// idle keep-alive one, or one still sending its headers) is closed to make room; when every
/// connection has a request being answered, the new one is closed instead. Health checks and
/// real clients arrive on new connections: they are served at once, and what is dropped costs a
/// well-behaved client at most a reconnect. Waiting in the listen backlog instead would hold
/// `/healthz` behind whoever holds the connections, for as long as the timeouts let them.
final class OpenConnections: Sendable {
    enum Admission {
        /// Serve it; close `evicting` (another connection) to make room.
        case admitted(evicting: (any Channel)?)
        /// Every open connection has a request being answered: close this one.
        case refused
    }

    private struct Connection {
        let channel: any Channel
        /// Since when it has had no request being answered; nil while one is.
        var waitingSince: ContinuousClock.Instant?
    }

    private struct State {
        var open: [ObjectIdentifier: Connection] = [:]
        var lastWarning: ContinuousClock.Instant?
    }

    let limit: Int
    private let logger: Logger
    private let state = Mutex(State())
    /// Under a flood the cap is met at every accept: one line a minute says so.
    private static let warningInterval = Duration.seconds(60)

    init(limit: Int, logger: Logger) {
        precondition(limit > 0)
        self.limit = limit
        self.logger = logger
    }

    /// Registers a connection just accepted.
    func admit(_ channel: any Channel) -> Admission {
        let id = ObjectIdentifier(channel)
        let now = ContinuousClock.now
        let (admission, open, warn) = state.withLock { state -> (Admission, Int, Bool) in
            state.open[id] = Connection(channel: channel, waitingSince: now)
            guard state.open.count > limit else { return (.admitted(evicting: nil), state.open.count, false) }
            let warn = state.lastWarning.map { now - $0 >= Self.warningInterval } ?? true
            if warn { state.lastWarning = now }
            // A linear scan, only at the cap: cheaper than keeping an order on every request.
            var oldest: (id: ObjectIdentifier, since: ContinuousClock.Instant)?
            for (key, connection) in state.open where key != id {
                if let since = connection.waitingSince, since < oldest?.since ?? now { oldest = (key, since) }
            }
            if let oldest, let victim = state.open.removeValue(forKey: oldest.id) {
                return (.admitted(evicting: victim.channel), state.open.count, warn)
            }
            state.open[id] = nil
            return (.refused, state.open.count, warn)
        }
        if warn {
            logger.warning(
                "open connections at the cap: closing the longest-waiting one for each new connection",
                metadata: ["connections": "\(open)", "limit": "\(limit)"])
        }
        return admission
    }

    /// A request's head was read: the connection is not to be closed for room until it is answered.
    func requestStarted(_ channel: any Channel) {
        state.withLock { $0.open[ObjectIdentifier(channel)]?.waitingSince = nil }
    }

    /// An answer was written in full: the connection waits for its next request.
    func requestAnswered(_ channel: any Channel) {
        let now = ContinuousClock.now
        state.withLock { $0.open[ObjectIdentifier(channel)]?.waitingSince = now }
    }

    func closed(_ channel: any Channel) {
        // An evicted or refused one is gone already; a live channel's identifier is its own.
        state.withLock { $0.open[ObjectIdentifier(channel)] = nil }
    }
}
