import DeviceRegistry
import Foundation
import NIOCore
import NIOHTTP2
import NIOPosix
import NIOSSL
import Synchronization

/// Where FCM is: `FCM_BASE_URL` taken apart for the connection and the `:authority`/`:path` headers.
struct FCMEndpoint: Sendable, Equatable {
    let host: String
    let port: Int
    /// The base URL's path without its trailing slash ("" for `https://fcm.googleapis.com`).
    let pathPrefix: String

    var authority: String {
        let name = host.contains(":") ? "[\(host)]" : host
        return port == 443 ? name : "\(name):\(port)"
    }

    /// FCM_BASE_URL's endpoint, or the configuration error that names it.
    static func parse(_ url: String) throws(ConfigurationError) -> FCMEndpoint {
        guard let endpoint = FCMEndpoint(url) else { throw .invalid("FCM_BASE_URL", "'\(url)' is not an https URL") }
        return endpoint
    }

    /// nil unless `url` is an absolute https URL with a host.
    init?(_ url: String) {
        guard let parsed = URLComponents(string: url), parsed.scheme?.lowercased() == "https",
              let host = parsed.host, !host.isEmpty else { return nil }
        self.host = host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host
        port = parsed.port ?? 443
        pathPrefix = parsed.path.hasSuffix("/") ? String(parsed.path.dropLast()) : parsed.path
    }
}

/// HTTP/2 connections to FCM, opened when needed: as many as the server's stream limit
/// (its SETTINGS) requires for `concurrency` requests in flight, each batch on the least busy
/// one. A connection that closes or gets GOAWAY is retired; the next batch opens a new one.
final class FCMConnectionPool: Sendable {
    private struct Connection {
        let id: Int
        let channel: EventLoopFuture<Channel>
        let state: FCMConnectionState
        var inFlight = 0
    }

    private struct Connections {
        var open: [Connection] = []
        var nextID = 0
        var closed = false
    }

    let endpoint: FCMEndpoint
    private let concurrency: Int
    private let tls: NIOSSLContext
    private let group: any EventLoopGroup
    private let connections = Mutex(Connections())

    init(endpoint: FCMEndpoint, concurrency: Int, tlsConfiguration: TLSConfiguration, group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton) throws {
        var tlsConfiguration = tlsConfiguration
        tlsConfiguration.applicationProtocols = ["h2"]
        self.tls = try NIOSSLContext(configuration: tlsConfiguration)
        self.endpoint = endpoint
        self.concurrency = concurrency
        self.group = group
    }

    /// Sends `requests` as one batch on one connection; one result per request, in order.
    func execute(_ requests: [FCMRequest], authorization: String, timeout: Duration) async -> [FCMExchangeResult] {
        guard !requests.isEmpty else { return [] }
        guard let connection = lease(requests.count) else {
            return requests.map { _ in .failure(.connectionClosed("the worker is shutting down")) }
        }
        defer { release(connection.id, count: requests.count) }
        do {
            let channel = try await connection.channel.get()
            let promise = channel.eventLoop.makePromise(of: [FCMExchangeResult].self)
            let batch = FCMBatch(authority: endpoint.authority, authorization: authorization, requests: requests, timeout: timeout, promise: promise)
            // Fails only when the handler never saw the batch (the channel had closed).
            channel.writeAndFlush(batch).whenFailure { promise.fail($0) }
            return try await promise.futureResult.get()
        } catch let error as FCMTransportError {
            return requests.map { _ in .failure(error) }
        } catch {
            return requests.map { _ in .failure(.connectionClosed("\(error)")) }
        }
    }

    /// Closes every connection; batches in flight fail as transient.
    func close() async {
        let channels = connections.withLock { connections in
            connections.closed = true
            defer { connections.open = [] }
            return connections.open.map(\.channel)
        }
        for channel in channels {
            try? await channel.get().close()
        }
    }

    private func lease(_ count: Int) -> Connection? {
        connections.withLock { connections -> Connection? in
            guard !connections.closed else { return nil }
            connections.open.removeAll { !$0.state.isUsable }
            let streamLimit = connections.open.first?.state.maxConcurrentStreams ?? 100
            let wanted = max(1, (concurrency + streamLimit - 1) / streamLimit)
            let index: Int
            if connections.open.count < wanted {
                let state = FCMConnectionState()
                connections.open.append(Connection(id: connections.nextID, channel: connect(state), state: state))
                connections.nextID += 1
                index = connections.open.count - 1
            } else {
                index = connections.open.indices.min { connections.open[$0].inFlight < connections.open[$1].inFlight }!
            }
            connections.open[index].inFlight += count
            return connections.open[index]
        }
    }

    private func release(_ id: Int, count: Int) {
        connections.withLock { connections in
            if let index = connections.open.firstIndex(where: { $0.id == id }) { connections.open[index].inFlight -= count }
        }
    }

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
                    // Header validation is for servers and proxies passing on others' headers: ours
                    // are built here, and of FCM's we read :status, retry-after and the body. It
                    // cost 4% of the worker's CPU.
                    try sync.addHandler(NIOHTTP2Handler(mode: .client, initialSettings: [
                        HTTP2Setting(parameter: .enablePush, value: 0),
                        HTTP2Setting(parameter: .maxConcurrentStreams, value: 0),
                        HTTP2Setting(parameter: .initialWindowSize, value: 65_535),
                    ], headerBlockValidation: .disabled))
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
