import DeviceRegistry
import Foundation
import NIOSSL
import PostgresNIO

/// Why a `DATABASE_URL` could not be used. The description never repeats the password.
public struct DatabaseURLError: Error, CustomStringConvertible, Equatable {
    public let reason: String
    public var description: String { "DATABASE_URL: \(reason)" }
}

/// Turns `postgres://user:password@host:port/db?sslmode=disable|prefer|require` into a
/// `PostgresClient.Configuration` (the pool every program uses), or into the configuration of
/// one connection of its own (``DatabaseReachability``'s startup check). `?host=/run/postgresql`
/// selects a Unix socket directory, as libpq does; `?pooler=transaction` says the URL leads
/// through a pooler in transaction mode (``pooler(_:)``).
public enum DatabaseConfiguration {
    /// Fail requests quickly while the database is down instead of queueing them for long.
    static let connectTimeout: Duration = .seconds(3)

    public static func parse(_ url: String) throws -> PostgresClient.Configuration {
        let settings = try Settings(url)
        var configuration: PostgresClient.Configuration
        switch settings.endpoint {
        case .unixSocket(let path):
            configuration = .init(
                unixSocketPath: path, username: settings.username, password: settings.password, database: settings.database)
        case .tcp(let host, let port):
            let tls: PostgresClient.Configuration.TLS =
                switch settings.tls {
                case .disable: .disable
                case .prefer(let tlsConfiguration): .prefer(tlsConfiguration)
                case .require(let tlsConfiguration): .require(tlsConfiguration)
                }
            configuration = .init(
                host: host, port: port, username: settings.username, password: settings.password,
                database: settings.database, tls: tls)
        }
        configuration.options.connectTimeout = connectTimeout
        if let poolMax = settings.poolMax { configuration.options.maximumConnections = poolMax }
        return configuration
    }

    /// What stands between the URL's connections and PostgreSQL: `?pooler=transaction` for a
    /// pooler in transaction mode, `session` (the default) for a direct connection or a pooler
    /// in session mode.
    public static func pooler(_ url: String) throws(DatabaseURLError) -> PoolerMode {
        try Settings(url).pooler
    }

    /// The same database as one connection, not a pool: the connect, TLS and log-in must all be
    /// done within `connectTimeout`. Throws ``DatabaseURLError``, or NIOSSL's error when the TLS
    /// configuration cannot be loaded.
    public static func connection(_ url: String, connectTimeout: Duration) throws -> PostgresConnection.Configuration {
        let settings = try Settings(url)
        var configuration: PostgresConnection.Configuration
        switch settings.endpoint {
        case .unixSocket(let path):
            configuration = .init(
                unixSocketPath: path, username: settings.username, password: settings.password, database: settings.database)
        case .tcp(let host, let port):
            let tls: PostgresConnection.Configuration.TLS =
                switch settings.tls {
                case .disable: .disable
                case .prefer(let tlsConfiguration): .prefer(try NIOSSLContext(configuration: tlsConfiguration))
                case .require(let tlsConfiguration): .require(try NIOSSLContext(configuration: tlsConfiguration))
                }
            configuration = .init(
                host: host, port: port, username: settings.username, password: settings.password,
                database: settings.database, tls: tls)
        }
        configuration.options.connectTimeout = TimeAmount(connectTimeout)
        return configuration
    }

    /// What a `DATABASE_URL` says, checked.
    struct Settings {
        enum Endpoint {
            case tcp(host: String, port: Int)
            case unixSocket(path: String)
        }

        enum TLS {
            case disable
            case prefer(TLSConfiguration)
            case require(TLSConfiguration)
        }

        let endpoint: Endpoint
        let tls: TLS
        let username: String
        let password: String?
        let database: String?
        let poolMax: Int?
        let pooler: PoolerMode

        init(_ url: String) throws(DatabaseURLError) {
            guard let components = URLComponents(string: url),
                let scheme = components.scheme, ["postgres", "postgresql"].contains(scheme)
            else {
                throw DatabaseURLError(reason: "expected postgres://user:password@host:port/database")
            }
            guard let username = components.percentEncodedUser.flatMap({ $0.removingPercentEncoding }),
                !username.isEmpty
            else {
                throw DatabaseURLError(reason: "a user name is required (postgres://USER@host/database)")
            }
            let path = components.percentEncodedPath.removingPercentEncoding ?? ""
            let database = path.hasPrefix("/") ? String(path.dropFirst()) : path
            let query = Dictionary(
                (components.queryItems ?? []).map { ($0.name, $0.value ?? "") },
                uniquingKeysWith: { _, last in last }
            )
            let port = components.port ?? 5432
            guard (1...65535).contains(port) else {
                throw DatabaseURLError(reason: "port \(port) is out of range")
            }

            if let socketDirectory = query["host"], socketDirectory.hasPrefix("/") {
                endpoint = .unixSocket(path: "\(socketDirectory)/.s.PGSQL.\(port)")
                tls = .disable
            } else {
                guard let host = components.host, !host.isEmpty else {
                    throw DatabaseURLError(reason: "a host is required")
                }
                endpoint = .tcp(host: host, port: port)
                switch query["sslmode"] ?? "prefer" {
                case "disable": tls = .disable
                case "prefer", "allow": tls = .prefer(.makeClientConfiguration())
                case "require":
                    // libpq's `require` encrypts without verifying the server certificate.
                    var tlsConfiguration = TLSConfiguration.makeClientConfiguration()
                    tlsConfiguration.certificateVerification = .none
                    tls = .require(tlsConfiguration)
                case "verify-ca", "verify-full": tls = .require(.makeClientConfiguration())
                case let other:
                    throw DatabaseURLError(reason: "sslmode '\(other)' is not one of disable, prefer, require, verify-ca, verify-full")
                }
            }
            if let value = query["pool_max"] {
                guard let size = Int(value), size > 0 else {
                    throw DatabaseURLError(reason: "pool_max must be a positive integer")
                }
                poolMax = size
            } else {
                poolMax = nil
            }
            if let value = query["pooler"] {
                guard let mode = PoolerMode(rawValue: value) else {
                    throw DatabaseURLError(reason: "pooler '\(value)' is not one of session, transaction")
                }
                pooler = mode
            } else {
                pooler = .session
            }
            self.username = username
            self.password = components.percentEncodedPassword.flatMap { $0.removingPercentEncoding }
            self.database = database.isEmpty ? nil : database
        }
    }
}
