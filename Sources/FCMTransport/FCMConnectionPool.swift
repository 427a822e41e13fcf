import Foundation
import NIOCore
import NIOHTTP2
import NIOPosix
import NIOSSL
import Synchronization

/// Where FCM is: `FCM_BASE_URL` taken apart for the connection and the `:authority`/`:path` headers.
public struct FCMEndpoint: Sendable, Equatable {
    public let host: String
    public let port: Int
    /// The base URL's path without its trailing slash ("" for `https://fcm.googleapis.com`).
    public let pathPrefix: String

    public var authority: String {
        let name = host.contains(":") ? "[\(host)]" : host
        return port == 443 ? name : "\(name):\(port)"
    }

    /// nil unless `url` is an absolute https URL with a host.
    public init?(_ url: String) {
        guard let parsed = URLComponents(string: url), parsed.scheme?.lowercased() == "https",
            let host = parsed.host, !host.isEmpty
        else { return nil }
        self.host = host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host
        port = parsed.port ?? 443
        pathPrefix = parsed.path.hasSuffix("/") ? String(parsed.path.dropLast()) : parsed.path
    }
}

/// HTTP/2 connections to FCM: as many as the server's stream limit (its SETTINGS) requires for
/// `concurrency` requests in flight. Requests go to connections with free streams, split across
/// several when one has too few; the next connection is opened while the open ones are three
/// quarters busy, before it is needed. A connection that closes or gets GOAWAY is retired; its
/// place is taken by a new one.
public final class FCMConnectionPool: Sendable {
    private struct Connection {
        let id: Int
        let channel: EventLoopFuture<Channel>
        let state: FCMConnectionState
        var inFlight = 0

        var freeStreams: Int { state.maxConcurrentStreams - inFlight }
    }

    private struct Connections {
        var open: [Connection] = []
        var nextID = 0
        var closed = false
    }

    /// A share of a request list for one connection.
    private struct Assignment {
        let connection: Connection
        let range: Range<Int>
    }

    public let endpoint: FCMEndpoint
    private let concurrency: Int
    private let tls: NIOSSLContext
    private let group: any EventLoopGroup
    private let connections = Mutex(Connections())

    public init(
        endpoint: FCMEndpoint, concurrency: Int, tlsConfiguration: TLSConfiguration,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) throws {
        var tlsConfiguration = tlsConfiguration
        tlsConfiguration.applicationProtocols = ["h2"]
        // Connections are closed at a stop, after the drain: the server's close_notify in reply
        // says nothing more (RFC 8446 §6.1 lets the closing side go without it), and waiting
        // NIOSSL's default 5 s for one that never comes (a dead network) would hold the stop.
        tlsConfiguration.shutdownTimeout = .milliseconds(500)
        self.tls = try NIOSSLContext(configuration: tlsConfiguration)
        self.endpoint = endpoint
        self.concurrency = concurrency
        self.group = group
    }

    /// Sends `requests`, each connection's share written with one flush; `onAnswer` gets each
    /// result (by index in `requests`) as its stream ends. Returns once every one has been answered.
    public func execute(
        _ requests: [FCMRequest], authorization: String, timeout: Duration,
        onAnswer: @escaping @Sendable (Int, FCMExchangeResult) -> Void
    ) async {
        guard !requests.isEmpty else { return }
        let assignments = lease(requests.count)
        guard !assignments.isEmpty else {
            for index in requests.indices { onAnswer(index, .failure(.notWritten("the worker is shutting down"))) }
            return
        }
        await withTaskGroup(of: Void.self) { group in
            for assignment in assignments {
                group.addTask {
                    await self.execute(
                        requests[assignment.range], on: assignment.connection, authorization: authorization, timeout: timeout,
                        onAnswer: onAnswer)
                }
            }
        }
    }

    private func execute(
        _ requests: ArraySlice<FCMRequest>, on connection: Connection, authorization: String, timeout: Duration,
        onAnswer: @escaping @Sendable (Int, FCMExchangeResult) -> Void
    ) async {
        let offset = requests.startIndex
        // Each answer frees its stream at once, for the next request to take. The handler answers
        // each request once; the failures below come only when it never saw the batch.
        let report: @Sendable (Int, FCMExchangeResult) -> Void = { [self] index, result in
            release(connection.id, count: 1)
            onAnswer(offset + index, result)
        }
        do {
            let channel = try await connection.channel.get()
            let promise = channel.eventLoop.makePromise(of: [FCMExchangeResult].self)
            let batch = FCMBatch(
                authority: endpoint.authority, authorization: authorization, requests: Array(requests), timeout: timeout,
                promise: promise, onAnswer: report)
            // Fails only when the handler never saw the batch (the channel had closed).
            channel.writeAndFlush(batch).whenFailure { promise.fail($0) }
            _ = try await promise.futureResult.get()
        } catch {
            let failure = error as? FCMTransportError ?? .notWritten("\(error)")
            for index in 0..<requests.count { report(index, .failure(failure)) }
        }
    }

    /// Closes every connection, all at once; batches in flight fail as transient.
    public func close() async {
        let channels = connections.withLock { connections in
            connections.closed = true
            defer { connections.open = [] }
            return connections.open.map(\.channel)
        }
        await withTaskGroup(of: Void.self) { group in
            for channel in channels {
                group.addTask { try? await channel.get().close() }
            }
        }
    }

    private func lease(_ count: Int) -> [Assignment] {
        connections.withLock { connections -> [Assignment] in
            guard !connections.closed else { return [] }
            connections.open.removeAll { !$0.state.isUsable }
            let streamLimit = connections.open.first?.state.maxConcurrentStreams ?? 100
            let wanted = max(1, (concurrency + streamLimit - 1) / streamLimit)
            func openConnection() {
                let state = FCMConnectionState()
                connections.open.append(Connection(id: connections.nextID, channel: connect(state), state: state))
                connections.nextID += 1
            }
            if connections.open.isEmpty { openConnection() }
            var assignments: [Assignment] = []
            var assigned = 0
            func assign(_ index: Int, _ share: Int) {
                guard share > 0 else { return }
                connections.open[index].inFlight += share
                assignments.append(Assignment(connection: connections.open[index], range: assigned..<(assigned + share)))
                assigned += share
            }
            for index in connections.open.indices.sorted(by: { connections.open[$0].inFlight < connections.open[$1].inFlight }) {
                assign(index, min(count - assigned, max(0, connections.open[index].freeStreams)))
            }
            while assigned < count && connections.open.count < wanted {
                openConnection()
                assign(connections.open.count - 1, min(count - assigned, streamLimit))
            }
            if assigned < count {
                // Every connection the limit allows is full: the rest wait in the least busy one's
                // queue (NIOHTTP2Handler starts them as streams end).
                let index = connections.open.indices.min { connections.open[$0].inFlight < connections.open[$1].inFlight }!
                assign(index, count - assigned)
            }
            let inFlight = connections.open.reduce(0) { $0 + $1.inFlight }
            if connections.open.count < wanted && inFlight * 4 >= connections.open.count * streamLimit * 3 { openConnection() }
            return assignments
        }
    }

    private func release(_ id: Int, count: Int) {
        connections.withLock { connections in
            if let index = connections.open.firstIndex(where: { $0.id == id }) { connections.open[index].inFlight -= count }
        }
    }

    private static let connectionConfiguration = {
        var configuration = NIOHTTP2Handler.ConnectionConfiguration()
        configuration.initialSettings = [
            HTTP2Setting(parameter: .enablePush, value: 0),
            HTTP2Setting(parameter: .maxConcurrentStreams, value: 0),
            HTTP2Setting(parameter: .initialWindowSize, value: 65_535),
        ]
        // Header validation is for servers and proxies passing on others' headers: ours are
        // built here, and of FCM's we read :status, retry-after and the body. It cost 4% of the
        // worker's CPU.
        configuration.headerBlockValidation = .disabled
        return configuration
    }()

    private static let streamConfiguration = {
        var configuration = NIOHTTP2Handler.StreamConfiguration()
        // NIO closes a connection that receives over 200 RST_STREAM in 30 s: a server's defence
        // against "rapid reset" floods. A server may end every stream it answered before reading
        // the body with RST_STREAM(NO_ERROR) (RFC 9113 §8.1; nginx does), so a client sees one per
        // request. The resets a server can send are bounded by the streams we open, so the limit
        // here only needs to stay above our own request rate.
        configuration.streamResetFrameRateLimit.maximumCount = 5_000
        configuration.streamResetFrameRateLimit.windowLength = .milliseconds(100)
        return configuration
    }()

    /// Starts a connection: TCP, TLS with ALPN `h2`, NIOHTTP2Handler, FCMStreamsHandler.
    private func connect(_ state: FCMConnectionState) -> EventLoopFuture<Channel> {
        let endpoint = self.endpoint
        let tls = self.tls
        // SNI carries names only; for an IP address NIOSSL checks the certificate's IP entries.
        let serverHostname = endpoint.host.isIPAddress ? nil : endpoint.host
        return ClientBootstrap(group: group)
            .connectTimeout(.seconds(5))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let sync = channel.pipeline.syncOperations
                    try sync.addHandler(NIOSSLClientHandler(context: tls, serverHostname: serverHostname))
                    try sync.addHandler(WriteCoalescer())
                    try sync.addHandler(
                        NIOHTTP2Handler(
                            mode: .client, frameDelegate: nil,
                            connectionConfiguration: Self.connectionConfiguration,
                            streamConfiguration: Self.streamConfiguration))
                    try sync.addHandler(FCMStreamsHandler(state: state))
                }
            }
            .connect(host: endpoint.host, port: endpoint.port)
            .flatMapErrorThrowing { error in
                state.retire()
                throw FCMTransportError.connectFailed("\(endpoint.host):\(endpoint.port): \(error)")
            }
    }
}

extension String {
    fileprivate var isIPAddress: Bool {
        (try? SocketAddress(ipAddress: self, port: 0)) != nil
    }
}
