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

/// Applies `sql/` migrations. Every run holds one session advisory lock, so several hosts may
/// run it at the same moment: the first applies, the others wait and then find nothing to do.
/// Each file runs in its own transaction together with its record in `schema_migrations`.
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

    /// Applies what is missing; returns the versions it applied (empty when up to date).
    @discardableResult
    public func run(on client: PostgresClient, logger: Logger) async throws -> [String] {
        try await client.withConnection { connection in
            try await connection.query("SELECT pg_advisory_lock(\(Self.lockKey))", logger: logger)
            do {
                let applied = try await self.applyPending(on: connection, logger: logger)
                try await connection.query("SELECT pg_advisory_unlock(\(Self.lockKey))", logger: logger)
                return applied
            } catch {
                // Closing the session would release the lock too; release it now so the pool can reuse it.
                _ = try? await connection.query("SELECT pg_advisory_unlock(\(Self.lockKey))", logger: logger)
                throw error
            }
        }
    }

    private func applyPending(on connection: PostgresConnection, logger: Logger) async throws -> [String] {
        try await connection.query(
            """
            CREATE TABLE IF NOT EXISTS schema_migrations (
                version text PRIMARY KEY,
                checksum text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now())
            """, logger: logger)
        var recorded: [String: String] = [:]
        for try await (version, checksum) in try await connection.query(
            "SELECT version, checksum FROM schema_migrations", logger: logger
        ).decode((String, String).self) {
            recorded[version] = checksum
        }
        let known = Set(migrations.map(\.version))
        if let stranger = recorded.keys.sorted().first(where: { !known.contains($0) }) {
            throw MigrationError.unknownApplied(version: stranger)
        }
        var applied: [String] = []
        for migration in migrations {
            if let checksum = recorded[migration.version] {
                guard checksum == migration.checksum else { throw MigrationError.edited(version: migration.version) }
                continue
            }
            do {
                try await connection.query("BEGIN", logger: logger)
                for statement in SQLScript.statements(migration.sql) {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await connection.query(
                    "INSERT INTO schema_migrations (version, checksum) VALUES (\(migration.version), \(migration.checksum))",
                    logger: logger)
                try await connection.query("COMMIT", logger: logger)
            } catch {
                _ = try? await connection.query("ROLLBACK", logger: logger)
                throw MigrationError.failed(version: migration.version, message: DatabaseErrorText.describe(error))
            }
            // Debug: pushctl migrate already reports what it applied on stdout.
            logger.debug("migration applied", metadata: ["push.migration": "\(migration.version)"])
            applied.append(migration.version)
        }
        return applied
    }
}
