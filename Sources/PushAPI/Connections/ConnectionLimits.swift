import DeviceRegistry
import HummingbirdCore
import Logging
import NIOCore
import ServiceSupport

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// How many client connections push-api holds, and for how long (see docs/operating.md,
/// "Connections and proxies"): Hummingbird's idle timeout, ``ConnectionGuard``'s read timeout, and a cap kept below
/// the process's open-files limit. At that limit accept() fails (EMFILE), and so does everything
/// else that opens a descriptor, database connections included: with the limit at 128, 150 idle
/// sockets made every new request time out and push-api spin at 100 % CPU.
struct ConnectionLimits: Sendable {
    static let defaultMaximumConnections = 4096
    /// Descriptors kept for everything but client connections and the database pool: the
    /// listening socket, the event loops' epoll, event and timer descriptors, stdio, files read
    /// at start.
    static let reservedFileDescriptors = 32
    /// Connections closed to make room hold their descriptor until their event loop has closed
    /// them; the listener stops accepting when this many more than the cap are still open.
    static let closingHeadroom = 32

    let idleTimeout: Duration
    let readTimeout: Duration
    let maximumConnections: Int
    let openFilesLimit: Int

    /// `openFilesLimit`: the descriptors this process may have open; `databaseConnections`: the
    /// pool's size.
    init(_ configuration: APIConfiguration, databaseConnections: Int, openFilesLimit: Int) throws(ConfigurationError) {
        idleTimeout = configuration.idleTimeout
        readTimeout = configuration.readTimeout
        self.openFilesLimit = openFilesLimit
        let otherUses = databaseConnections + Self.reservedFileDescriptors + Self.closingHeadroom
        let room = openFilesLimit - otherUses
        let raise = "raise the open-files limit (ulimit -n, systemd LimitNOFILE=, docker run --ulimit nofile=)"
        if let configured = configuration.maximumConnections {
            guard configured <= room else {
                throw .invalid(
                    "API_MAX_CONNECTIONS",
                    "\(configured) connections need an open-files limit of at least "
                        + "\(configured + otherUses) with pool_max=\(databaseConnections); this process may open \(openFilesLimit): \(raise)"
                )
            }
            maximumConnections = configured
        } else {
            guard room >= 1 else {
                throw .invalid(
                    "API_MAX_CONNECTIONS",
                    "the open-files limit \(openFilesLimit) leaves no room for connections "
                        + "beside the database pool (pool_max=\(databaseConnections)): \(raise)")
            }
            maximumConnections = min(Self.defaultMaximumConnections, room)
        }
    }

    /// Hummingbird's HTTP/1.1 server with the timeouts and the cap.
    func server(logger: Logger) -> HTTPServerBuilder {
        let connections = OpenConnections(limit: maximumConnections, logger: logger)
        let readTimeout = TimeAmount(readTimeout)
        return .http1(
            configuration: .init(
                additionalChannelHandlers: [ConnectionGuard(connections: connections, readTimeout: readTimeout, logger: logger)],
                idleTimeout: TimeAmount(idleTimeout)))
    }

    /// A backstop below the open-files limit in case closing for room falls behind a burst of
    /// accepts: past it, new connections wait in the listen backlog.
    func listenerLimit(logger: Logger) -> MaximumAvailableConnections {
        MaximumAvailableConnections(maximumConnections + Self.closingHeadroom, logger: logger)
    }
}

enum OpenFilesLimit {
    /// Raises this process's soft limit on open files to its hard limit (as far as an
    /// unprivileged process may: distributions start services at a soft 1024) and returns the
    /// limit now in force.
    static func raiseToHardLimit() -> Int {
        var limit = rlimit()
        guard getrlimit(resource, &limit) == 0 else { return 1024 }
        var wanted = limit.rlim_max
        #if canImport(Darwin)
            // macOS reports an unlimited hard limit and refuses more than OPEN_MAX.
            wanted = min(wanted, rlim_t(OPEN_MAX))
        #endif
        if limit.rlim_cur < wanted {
            var raised = limit
            raised.rlim_cur = wanted
            if setrlimit(resource, &raised) == 0 { limit = raised }
        }
        return Int(clamping: limit.rlim_cur)
    }

    #if canImport(Glibc)
        private static let resource = __rlimit_resource_t(RLIMIT_NOFILE.rawValue)
    #else
        private static let resource = RLIMIT_NOFILE
    #endif
}
