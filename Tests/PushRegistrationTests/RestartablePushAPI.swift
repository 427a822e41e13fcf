import DeviceRegistry
import Foundation
import Logging
import PostgresNIO
import PushRegistration
import Synchronization
import TestSupport
import Testing

let registrationTestLogger: Logger = {
    var logger = Logger(label: "push-registration-tests")
    logger.logLevel = .warning
    return logger
}()

/// push-api as deployed (the executable the suite builds, as a subprocess) on its own database
/// with one app, on a port chosen up front so that it can be stopped and started again where the
/// clients point: the tests' network going away and coming back.
final class RestartablePushAPI: Sendable {
    let databaseURL: String
    let appID: Int64
    let port: Int
    private let running = Mutex<RunningProduct?>(nil)

    var baseURL: URL { URL(string: "http://127.0.0.1:\(port)")! }

    private init(databaseURL: String, appID: Int64, port: Int) {
        self.databaseURL = databaseURL
        self.appID = appID
        self.port = port
    }

    /// A fresh database from the suite's throwaway PostgreSQL; push-api not started yet.
    static func onTestDatabase() async throws -> RestartablePushAPI {
        let database = try await TestPostgres.shared.makeDatabase()
        return try await on(databaseURL: database.url)
    }

    /// A database already migrated (the suite's, or a cluster of the test's own).
    static func on(databaseURL: String) async throws -> RestartablePushAPI {
        let appID = try await TestPostgres.withClient(url: databaseURL) { client in
            try await AppDirectory(client: client, logger: registrationTestLogger).add(code: "wowa", name: "Wowa", serviceAccount: nil).id
        }
        return RestartablePushAPI(databaseURL: databaseURL, appID: appID, port: try LocalCluster.freePort())
    }

    /// Starts push-api and waits until it answers /healthz.
    func start() async throws {
        let product = try BuiltProduct("push-api").start(
            [],
            environment: [
                "DATABASE_URL": databaseURL, "API_PORT": "\(port)", "JWT_SECRET": TokenMint.secret, "LOG_LEVEL": "warning",
                // The tests register more often than a user a minute; the limit is push-api's own test.
                "REGISTRATIONS_PER_USER_PER_MINUTE": "1000",
            ])
        running.withLock { $0 = product }
        try await product.waitUntilHealthy(port: port)
    }

    /// SIGTERM, and SIGKILL if it has not exited within 10 s.
    func stop() async {
        let product = running.withLock { running in
            defer { running = nil }
            return running
        }
        await product?.terminate()
    }

    func token(user: Int64, expiresIn: TimeInterval = 600) -> String {
        TokenMint.sign(TokenMint.claims(userID: user, appID: appID, expiresIn: expiresIn))
    }

    /// A user's access-token provider that always has a valid token.
    func accessTokens(user: Int64) -> AccessTokenProvider {
        let token = token(user: user)
        return { _ in token }
    }

    /// One push_devices row, as the assertions read it.
    struct Row: Sendable, Equatable, CustomStringConvertible {
        let id: Int64
        let userID: Int64
        let token: String
        let deviceID: String?
        let isActive: Bool
        let deactivationReason: String?
        let lastUsedAt: Date
        let createdAt: Date
        let deactivatedAt: Date?

        var description: String {
            "#\(id) user \(userID) \(token) device \(deviceID ?? "-") \(isActive ? "active" : "inactive (\(deactivationReason ?? "?"))")"
        }
    }

    /// The app's rows, oldest first.
    func rows() async throws -> [Row] {
        try await TestPostgres.withClient(url: databaseURL) { client in
            let appID = self.appID
            let rows = try await client.query(
                """
                SELECT id, user_id, token, device_id, is_active, deactivation_reason, last_used_at, created_at, deactivated_at
                  FROM push_devices WHERE app_id = \(appID) ORDER BY id
                """, logger: registrationTestLogger)
            var read: [Row] = []
            for try await (id, user, token, device, active, reason, used, created, deactivated) in rows.decode(
                (Int64, Int64, String, String?, Bool, String?, Date, Date, Date?).self)
            {
                read.append(
                    Row(
                        id: id, userID: user, token: token, deviceID: device, isActive: active, deactivationReason: reason,
                        lastUsedAt: used,
                        createdAt: created, deactivatedAt: deactivated))
            }
            return read
        }
    }

    /// Polls the rows until `holds` is true, at most `limit`; the rows last read either way.
    @discardableResult
    func rows(within limit: Duration = .seconds(10), until holds: ([Row]) -> Bool, sourceLocation: SourceLocation = #_sourceLocation)
        async throws -> [Row]
    {
        let deadline = ContinuousClock.now + limit
        var rows = try await self.rows()
        while !holds(rows) && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
            rows = try await self.rows()
        }
        #expect(holds(rows), "rows after \(limit): \(rows)", sourceLocation: sourceLocation)
        return rows
    }
}
