import Foundation
import Logging

/// push-api's settings, from the environment (see docs/configuration in the README).
public struct APIConfiguration: Sendable {
    public var databaseURL: String
    public var host: String
    public var port: Int
    public var jwt: UserTokenVerifier.Configuration
    public var logLevel: Logger.Level
    /// The longest a request waits for the database before answering 503.
    public var databaseDeadline: Duration

    public init(databaseURL: String, host: String = "127.0.0.1", port: Int = 8080,
                jwt: UserTokenVerifier.Configuration, logLevel: Logger.Level = .info,
                databaseDeadline: Duration = .seconds(5)) {
        self.databaseURL = databaseURL
        self.host = host
        self.port = port
        self.jwt = jwt
        self.logLevel = logLevel
        self.databaseDeadline = databaseDeadline
    }

    public enum Error: Swift.Error, CustomStringConvertible, Equatable {
        case missing(String)
        case invalid(String, String)

        public var description: String {
            switch self {
            case .missing(let name): "\(name) is required"
            case .invalid(let name, let reason): "\(name): \(reason)"
            }
        }
    }

    /// Reads `DATABASE_URL`, `API_HOST`, `API_PORT`, `JWT_SECRET`, `JWT_PUBLIC_KEY_FILE`,
    /// `JWT_ISSUER`, `JWT_AUDIENCE` and `LOG_LEVEL`.
    public static func fromEnvironment(_ environment: [String: String]) throws(Error) -> APIConfiguration {
        func value(_ name: String) -> String? {
            guard let value = environment[name], !value.isEmpty else { return nil }
            return value
        }
        guard let databaseURL = value("DATABASE_URL") else { throw .missing("DATABASE_URL") }
        let port: Int
        if let text = value("API_PORT") {
            guard let parsed = Int(text), (0...65535).contains(parsed) else { throw .invalid("API_PORT", "'\(text)' is not a port number") }
            port = parsed
        } else {
            port = 8080
        }
        var jwt = UserTokenVerifier.Configuration(
            hmacSecret: value("JWT_SECRET"), issuer: value("JWT_ISSUER"), audience: value("JWT_AUDIENCE"))
        if let path = value("JWT_PUBLIC_KEY_FILE") {
            guard let pem = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw .invalid("JWT_PUBLIC_KEY_FILE", "\(path) cannot be read")
            }
            jwt.publicKeyPEM = pem
            jwt.publicKeyPath = path
        }
        let logLevel: Logger.Level
        if let text = value("LOG_LEVEL") {
            guard let level = Logger.Level(rawValue: text.lowercased()) else {
                throw .invalid("LOG_LEVEL", "'\(text)' is not one of trace, debug, info, notice, warning, error, critical")
            }
            logLevel = level
        } else {
            logLevel = .info
        }
        return APIConfiguration(databaseURL: databaseURL, host: value("API_HOST") ?? "127.0.0.1", port: port,
                                jwt: jwt, logLevel: logLevel)
    }
}
