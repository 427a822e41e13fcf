import DeviceRegistry
import Foundation
import Logging
import NIOCore
import NIOPosix
import PostgresNIO

/// The database could not be reached at startup: one line for an operator, naming where and why.
public enum DatabaseUnreachable: Error, CustomStringConvertible, Equatable {
    /// Nothing listens at `target` (`host:port`, or a socket path): known at once.
    case refused(target: String)
    /// The host name has no address.
    case unresolvable(host: String)
    /// No socket file where `?host=` says the server's directory is.
    case noSocket(path: String)
    /// Something accepted the connection but did not complete PostgreSQL's log-in within `limit`.
    case noAnswer(target: String, within: Duration)
    /// The connection or the server refused the log-in (role, password, database, TLS).
    case failed(target: String, reason: String)

    public var description: String {
        switch self {
        case .refused(let target): "cannot reach the database: connection refused at \(target)"
        case .unresolvable(let host): "cannot reach the database: cannot resolve \(host)"
        case .noSocket(let path): "cannot reach the database: no socket at \(path)"
        case .noAnswer(let target, let limit): "cannot reach the database at \(target): no connection within \(limit)"
        case .failed(let target, let reason): "cannot reach the database at \(target): \(reason)"
        }
    }
}

/// Checks, before a program starts its work, that the database answers: a wrong host, port,
/// password or database name is one clear line at startup, not a stream of retries.
public enum DatabaseReachability {
    /// `SELECT 1` through `client`, whose `run()` must be going, within `limit` (the pool keeps
    /// retrying the connection meanwhile, so a database restarting is waited for). What `/readyz` asks.
    public static func ping(_ client: PostgresClient, within limit: Duration, logger: Logger) async throws {
        try await DatabaseDeadline(limit: limit).run { _ = try await DatabaseStatement.run("SELECT 1", on: client, logger: logger) }
    }

    /// Opens one connection of its own and closes it, within `limit`. Not through a pool: a
    /// `PostgresClient` retries a failed connect in the background, so a refused connection or a
    /// wrong password would only show as its lease timing out. Throws ``DatabaseURLError`` for a
    /// URL that cannot be used, else ``DatabaseUnreachable``.
    public static func verify(url: String, limit: Duration = .seconds(5), logger: Logger) async throws {
        let configuration = try DatabaseConfiguration.connection(url, connectTimeout: limit)
        let target = configuration.host.map { "\($0):\(configuration.port ?? 5432)" } ?? configuration.unixSocketPath ?? "?"
        // The connection's own log lines are not for the operator: the one error below says it all.
        var quiet = logger
        quiet.logLevel = .critical
        let connection: PostgresConnection
        do {
            connection = try await PostgresConnection.connect(configuration: configuration, id: 0, logger: quiet)
        } catch {
            throw unreachable(error, target: target, host: configuration.host, limit: limit)
        }
        try? await connection.close()
    }

    /// What a failed connect means, from PostgresNIO's error and the NIO error under it.
    static func unreachable(_ error: any Error, target: String, host: String?, limit: Duration) -> DatabaseUnreachable {
        guard let psqlError = error as? PSQLError, psqlError.code == .connectionError, let underlying = psqlError.underlying else {
            return .failed(target: target, reason: DatabaseErrorText.describe(error))
        }
        switch underlying {
        case let connecting as NIOConnectionError:
            // Every address refused, or no address at all (a name that does not resolve).
            let errnos = connecting.connectionErrors.compactMap { ($0.error as? IOError)?.errnoCode }
            if !errnos.isEmpty, errnos.allSatisfy({ $0 == ECONNREFUSED }) { return .refused(target: target) }
            if connecting.connectionErrors.isEmpty, connecting.dnsAError != nil || connecting.dnsAAAAError != nil {
                return .unresolvable(host: host ?? connecting.host)
            }
        case let io as IOError where io.errnoCode == ECONNREFUSED:
            return .refused(target: target)
        case let io as IOError where io.errnoCode == ENOENT && host == nil:
            return .noSocket(path: target)
        case let channel as ChannelError:
            if case .connectTimeout = channel { return .noAnswer(target: target, within: limit) }
        default:
            break
        }
        return .failed(target: target, reason: "\(underlying)")
    }
}
