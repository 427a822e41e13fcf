import Foundation
import NIOSSL
import PostgresNIO

/// Why a `DATABASE_URL` could not be used. The description never repeats the password.
public struct DatabaseURLError: Error, CustomStringConvertible, Equatable {
    public let reason: String
    public var description: String { "DATABASE_URL: \(reason)" }
}

/// Turns `postgres://user:password@host:port/db?sslmode=disable|prefer|require` into a
/// `PostgresClient.Configuration`. `?host=/run/postgresql` selects a Unix socket directory,
/// as libpq does.
public enum DatabaseConfiguration {
    public static func parse(_ url: String) throws -> PostgresClient.Configuration {
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
        let password = components.percentEncodedPassword.flatMap { $0.removingPercentEncoding }
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

        var configuration: PostgresClient.Configuration
        if let socketDirectory = query["host"], socketDirectory.hasPrefix("/") {
            configuration = .init(
                unixSocketPath: "\(socketDirectory)/.s.PGSQL.\(port)",
                username: username, password: password, database: database.isEmpty ? nil : database
            )
        } else {
            guard let host = components.host, !host.isEmpty else {
                throw DatabaseURLError(reason: "a host is required")
            }
            let tls: PostgresClient.Configuration.TLS
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
            configuration = .init(
                host: host, port: port, username: username, password: password,
                database: database.isEmpty ? nil : database, tls: tls
            )
        }
        // Fail requests quickly while the database is down instead of queueing them for long.
        configuration.options.connectTimeout = .seconds(3)
        if let value = query["pool_max"] {
            guard let size = Int(value), size > 0 else {
                throw DatabaseURLError(reason: "pool_max must be a positive integer")
            }
            configuration.options.maximumConnections = size
        }
        return configuration
    }
}
