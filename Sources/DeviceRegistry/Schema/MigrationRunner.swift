import Crypto
import Foundation
import Logging
import PostgresNIO

/// A migration file under `sql/`: `NNN_name.sql`, applied once, in name order.
public struct Migration: Sendable, Equatable {
    public let version: String
    public let sql: String

    public init(version: String, sql: String) {
        self.version = version
        self.sql = sql
    }
    public var checksum: String {
        SHA256.hash(data: Data(sql.utf8)).map { String(format: "%02x", $0) }.joined()
    }
}

public enum MigrationError: Error, CustomStringConvertible {
    case directoryUnreadable(path: String)
    case edited(version: String)
    case unknownApplied(version: String)
    case failed(version: String, message: String)

    public var description: String {
        switch self {
        case .directoryUnreadable(let path):
            "migrations: cannot read the folder \(path)"
        case .edited(let version):
            "migrations: \(version) was edited after it was applied; add a new migration instead"
        case .unknownApplied(let version):
            "migrations: the database has \(version) applied, which this build does not know (is this build older than the database?)"
        case .failed(let version, let message):
            "migrations: \(version) failed and was rolled back: \(message)"
        }
    }
}

/// Applies `sql/` migrations. Each file runs in its own transaction together with its record in
/// `schema_migrations`, and each of those transactions first takes one transaction-scoped
/// advisory lock, so several hosts may run it at the same moment: each file is applied once,
/// in order, by whichever run takes the lock when it is next. Nothing outlives a transaction,
/// so it runs the same through a pooler in transaction mode (a session lock there would be
/// held by whatever server session the pooler picked, and released on another's, or never).
public struct MigrationRunner: Sendable {
    public let migrations: [Migration]
    private static let lockKey: Int64 = 0x7075_7368_6d69_6772  // "pushmigr"

    public init(migrations: [Migration]) {
        self.migrations = migrations.sorted { $0.version < $1.version }
    }

    /// The migrations shipped with this build (the repository's `sql/` folder).
    public static func bundled() throws -> MigrationRunner {
        guard let url = Bundle.module.url(forResource: "Migrations", withExtension: nil) else {
            throw MigrationError.directoryUnreadable(path: "<bundled Migrations>")
        }
        return try MigrationRunner(directory: url)
    }

    public init(directory: URL) throws {
        let names: [String]
        do {
            names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
        } catch {
            throw MigrationError.directoryUnreadable(path: directory.path)
        }
        let migrations = try names.filter { $0.hasSuffix(".sql") }.map { name in
            let text = try String(contentsOf: directory.appendingPathComponent(name), encoding: .utf8)
            return Migration(version: String(name.dropLast(4)), sql: text)
        }
        self.init(migrations: migrations)
    }

    /// Applies what is missing; returns the versions this run applied (empty when up to date, or
    /// when a concurrent run applied them).
    @discardableResult
    public func run(on client: PostgresClient, logger: Logger) async throws -> [String] {
        try await client.withConnection { connection in
            var applied: [String] = []
            while let version = try await applyNext(on: connection, logger: logger) { applied.append(version) }
            return applied
        }
    }

    /// In one transaction under the lock: checks what is recorded, then applies the first file
    /// not applied yet with its record. Returns its version, or nil when nothing is left.
    private func applyNext(on connection: PostgresConnection, logger: Logger) async throws -> String? {
        var applying: Migration?
        let applied: String?
        do {
            applied = try await DatabaseTransaction.run(on: connection, logger: logger) { transaction in
                try await transaction.query("SELECT pg_advisory_xact_lock(\(Self.lockKey))")
                guard let migration = try await firstPending(in: transaction) else { return nil }
                applying = migration
                for statement in SQLScript.statements(migration.sql) {
                    try await transaction.query(PostgresQuery(unsafeSQL: statement))
                }
                try await transaction.query(
                    "INSERT INTO schema_migrations (version, checksum) VALUES (\(migration.version), \(migration.checksum))")
                return migration.version
            }
        } catch {
            guard let applying else { throw error }
            throw MigrationError.failed(version: applying.version, message: DatabaseErrorText.describe(error))
        }
        if let applied {
            // Debug: pushctl migrate already reports what it applied on stdout.
            logger.debug("migration applied", metadata: ["push.migration": "\(applied)"])
        }
        return applied
    }

    /// The first migration not recorded yet, once every recorded one is known and unedited.
    private func firstPending(in transaction: DatabaseTransaction) async throws -> Migration? {
        try await transaction.query(
            """
            CREATE TABLE IF NOT EXISTS schema_migrations (
                version text PRIMARY KEY,
                checksum text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now())
            """)
        var recorded: [String: String] = [:]
        for row in try await transaction.query("SELECT version, checksum FROM schema_migrations") {
            let (version, checksum) = try row.decode((String, String).self)
            recorded[version] = checksum
        }
        let known = Set(migrations.map(\.version))
        if let stranger = recorded.keys.sorted().first(where: { !known.contains($0) }) {
            throw MigrationError.unknownApplied(version: stranger)
        }
        for migration in migrations {
            guard let checksum = recorded[migration.version] else { return migration }
            guard checksum == migration.checksum else { throw MigrationError.edited(version: migration.version) }
        }
        return nil
    }
}
