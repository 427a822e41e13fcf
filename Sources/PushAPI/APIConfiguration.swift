import DeviceRegistry
import Foundation
import Logging
import ServiceSupport

/// push-api's settings, from the environment (see the configuration table in docs/operating.md).
public struct APIConfiguration: Sendable {
    public var databaseURL: String
    /// A streaming standby the audit is read from (DATABASE_READ_URL): the admin API's and the
    /// console's listings; writes stay on `databaseURL`.
    public var readDatabaseURL: String?
    public var host: String
    public var port: Int
    public var jwt: UserTokenVerifier.Configuration
    public var logLevel: Logger.Level
    /// The longest a request waits for the database before answering 503.
    public var databaseDeadline: Duration
    /// The bearer token of the service/admin endpoints; without one they answer 404.
    public var adminToken: String?
    /// How much one user may register.
    public var registrationLimits: RegistrationLimits
    /// How long a kept-alive connection may wait for its next request.
    public var idleTimeout: Duration
    /// How long a request's headers and body may take to arrive, from its first byte (a new
    /// connection's first request: from the connection).
    public var readTimeout: Duration
    /// Open client connections at most; nil: 4,096, or fewer when the open-files limit is lower.
    public var maximumConnections: Int?

    public init(
        databaseURL: String, host: String = "127.0.0.1", port: Int = 8080,
        jwt: UserTokenVerifier.Configuration, logLevel: Logger.Level = .info,
        databaseDeadline: Duration = .seconds(5), adminToken: String? = nil,
        registrationLimits: RegistrationLimits = RegistrationLimits(),
        idleTimeout: Duration = .seconds(75), readTimeout: Duration = .seconds(10), maximumConnections: Int? = nil,
        readDatabaseURL: String? = nil
    ) {
        self.databaseURL = databaseURL
        self.readDatabaseURL = readDatabaseURL
        self.host = host
        self.port = port
        self.jwt = jwt
        self.logLevel = logLevel
        self.databaseDeadline = databaseDeadline
        self.adminToken = adminToken
        self.registrationLimits = registrationLimits
        self.idleTimeout = idleTimeout
        self.readTimeout = readTimeout
        self.maximumConnections = maximumConnections
    }

    /// Every environment variable push-api reads.
    public static let environmentVariables: Set<String> = [
        "DATABASE_URL", "DATABASE_READ_URL", "API_HOST", "API_PORT", "JWT_SECRET", "JWT_PUBLIC_KEY_FILE", "JWT_ISSUER", "JWT_AUDIENCE",
        "PUSH_ADMIN_TOKEN", "LOG_LEVEL", "MAX_ACTIVE_DEVICES_PER_USER", "REGISTRATIONS_PER_USER_PER_MINUTE",
        "API_IDLE_TIMEOUT_SECONDS", "API_READ_TIMEOUT_SECONDS", "API_MAX_CONNECTIONS", "LOGOUT_TOKEN_GRACE_SECONDS",
    ]

    /// The shortest admin token accepted: a guessable one would open every user's notifications.
    public static let minimumAdminTokenLength = 16

    public static func fromEnvironment(_ environment: [String: String]) throws(ConfigurationError) -> APIConfiguration {
        let settings = EnvironmentSettings(environment, declared: environmentVariables)
        var jwt = UserTokenVerifier.Configuration(
            hmacSecret: settings.value("JWT_SECRET"), issuer: settings.value("JWT_ISSUER"), audience: settings.value("JWT_AUDIENCE"))
        if let grace = try settings.integer("LOGOUT_TOKEN_GRACE_SECONDS", in: 0...31_536_000) {
            jwt.logoutGrace = .seconds(grace)
        }
        if let path = settings.value("JWT_PUBLIC_KEY_FILE") {
            guard let pem = try? String(contentsOfFile: path, encoding: .utf8) else {
                throw .invalid("JWT_PUBLIC_KEY_FILE", "\(path) cannot be read")
            }
            jwt.publicKeyPEM = pem
            jwt.publicKeyPath = path
        }
        // A secret file's trailing newline is not part of the token clients send.
        let adminToken = settings.value("PUSH_ADMIN_TOKEN")?.trimmingCharacters(in: .whitespacesAndNewlines)
        if let adminToken, adminToken.utf8.count < minimumAdminTokenLength {
            throw .invalid("PUSH_ADMIN_TOKEN", "must be at least \(minimumAdminTokenLength) characters (e.g. openssl rand -hex 32)")
        }
        let readDatabaseURL = settings.value("DATABASE_READ_URL")
        if let readDatabaseURL {
            do {
                _ = try DatabaseConfiguration.pooler(readDatabaseURL)
            } catch {
                throw .invalid("DATABASE_READ_URL", error.reason)
            }
        }
        return APIConfiguration(
            databaseURL: try settings.required("DATABASE_URL"), host: settings.value("API_HOST") ?? "127.0.0.1",
            port: try settings.integer("API_PORT", in: 0...65535) ?? 8080, jwt: jwt, logLevel: try settings.logLevel() ?? .info,
            adminToken: adminToken, registrationLimits: try RegistrationLimits(settings),
            idleTimeout: .seconds(try settings.integer("API_IDLE_TIMEOUT_SECONDS", in: 1...3600) ?? 75),
            readTimeout: .seconds(try settings.integer("API_READ_TIMEOUT_SECONDS", in: 1...300) ?? 10),
            maximumConnections: try settings.integer("API_MAX_CONNECTIONS", in: 1...1_000_000), readDatabaseURL: readDatabaseURL)
    }
}
