import Foundation
import Logging
import PostgresNIO
import WireFormats

/// A row of `apps`, without its private key.
public struct App: Sendable, Equatable {
    public let id: Int64
    public let code: String
    public let name: String
    public let fcmProjectID: String?
    public let fcmClientEmail: String?
    public let hasCredentials: Bool
    /// A send to `fcmProjectID` has succeeded (`apps.fcm_proven_project_id` is that project):
    /// the credentials reach the project, and FCM's SENDER_ID_MISMATCH is believed about devices.
    public let isProjectProven: Bool
    public let createdAt: Date
    /// First sends per second across all workers; nil: unlimited.
    public let maxSendsPerSecond: Int?
}

public enum AppDirectoryError: Error, CustomStringConvertible, Equatable {
    case invalidCode(String)
    case invalidName
    case duplicateCode(String)
    case unknownCode(String)
    case invalidRate(Int)

    public var description: String {
        switch self {
        case .invalidCode(let code):
            "app code '\(code)' must be 1 to 64 lowercase letters, digits, '-' or '_', starting with a letter or digit"
        case .invalidName: "app name must be 1 to 200 characters, without NUL"
        case .duplicateCode(let code): "an app with code '\(code)' already exists"
        case .unknownCode(let code): "no app with code '\(code)'"
        case .invalidRate(let rate): "the send rate must be 1 to \(Int32.max) sends per second, not \(rate)"
        }
    }
}

/// The `apps` table: one row per mobile app and its Firebase credentials.
public struct AppDirectory: Sendable {
    let client: PostgresClient
    let logger: Logger

    public init(client: PostgresClient, logger: Logger) {
        self.client = client
        self.logger = logger
    }

    public static func validate(code: String) throws(AppDirectoryError) {
        let allowed = code.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7A) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2D || $0 == 0x5F }
        guard (1...64).contains(code.utf8.count), allowed, code.first != "-", code.first != "_" else {
            throw .invalidCode(code)
        }
    }

    public func add(code: String, name: String, serviceAccount: ServiceAccount?) async throws -> App {
        try Self.validate(code: code)
        // The table counts code points (char_length), not grapheme clusters.
        guard (1...200).contains(name.unicodeScalars.count), !name.holdsNUL else { throw AppDirectoryError.invalidName }
        do {
            let rows = try await DatabaseStatement.run(
                """
                INSERT INTO apps (code, name, fcm_project_id, fcm_client_email, fcm_private_key, fcm_private_key_id)
                VALUES (\(code), \(name), \(serviceAccount?.projectID), \(serviceAccount?.clientEmail),
                        \(serviceAccount?.privateKeyPEM), \(serviceAccount?.privateKeyID))
                RETURNING \(unescaped: Self.columns)
                """, on: client, logger: logger)
            return try Self.first(rows)!
        } catch  where DatabaseErrorText.sqlState(error) == .uniqueViolation {
            throw AppDirectoryError.duplicateCode(code)
        }
    }

    public func setCredentials(code: String, serviceAccount: ServiceAccount) async throws -> App {
        let rows = try await DatabaseStatement.run(
            """
            UPDATE apps SET fcm_project_id = \(serviceAccount.projectID),
                            fcm_client_email = \(serviceAccount.clientEmail),
                            fcm_private_key = \(serviceAccount.privateKeyPEM),
                            fcm_private_key_id = \(serviceAccount.privateKeyID),
                            updated_at = now()
             WHERE code = \(code)
            RETURNING \(unescaped: Self.columns)
            """, on: client, logger: logger)
        guard let app = try Self.first(rows) else { throw AppDirectoryError.unknownCode(code) }
        return app
    }

    /// Caps the app's first sends per second, shared by every worker (`apps.max_sends_per_second`);
    /// nil lifts the cap. Running workers follow the change.
    public func setRate(code: String, perSecond: Int?) async throws -> App {
        // The column is an integer.
        if let perSecond, !(1...Int(Int32.max)).contains(perSecond) { throw AppDirectoryError.invalidRate(perSecond) }
        let rows = try await DatabaseStatement.run(
            """
            UPDATE apps SET max_sends_per_second = \(perSecond), updated_at = now()
             WHERE code = \(code)
            RETURNING \(unescaped: Self.columns)
            """, on: client, logger: logger)
        guard let app = try Self.first(rows) else { throw AppDirectoryError.unknownCode(code) }
        return app
    }

    public func list() async throws -> [App] {
        let rows = try await DatabaseStatement.run("SELECT \(unescaped: Self.columns) FROM apps ORDER BY code", on: client, logger: logger)
        return try rows.map { try Self.app($0.decode(Row.self)) }
    }

    public func app(code: String) async throws -> App? {
        try Self.first(
            await DatabaseStatement.run("SELECT \(unescaped: Self.columns) FROM apps WHERE code = \(code)", on: client, logger: logger))
    }

    public func exists(id: Int64) async throws -> Bool {
        let rows = try await DatabaseStatement.run("SELECT EXISTS (SELECT 1 FROM apps WHERE id = \(id))", on: client, logger: logger)
        return try rows.first?.decode(Bool.self) ?? false
    }

    private typealias Row = (Int64, String, String, String?, String?, Bool, Bool, Date, Int?)
    private static let columns = """
        id, code, name, fcm_project_id, fcm_client_email, fcm_private_key IS NOT NULL,
        COALESCE(fcm_proven_project_id = fcm_project_id, false), created_at, max_sends_per_second
        """

    private static func app(_ row: Row) -> App {
        App(
            id: row.0, code: row.1, name: row.2, fcmProjectID: row.3, fcmClientEmail: row.4,
            hasCredentials: row.5, isProjectProven: row.6, createdAt: row.7, maxSendsPerSecond: row.8)
    }

    private static func first(_ rows: PostgresQueryResult) throws -> App? {
        try rows.first.map { try app($0.decode(Row.self)) }
    }
}
