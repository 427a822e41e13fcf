import DeviceRegistry
import Foundation
import Logging
import PostgresNIO

#if canImport(Glibc)
    import Glibc
#endif

extension LocalCluster {
    /// A hot standby of this cluster, as operators make one: `pg_basebackup -R` (at once after a
    /// fast checkpoint, not a spread one that takes minutes; the WAL it
    /// needs streamed alongside, `standby.signal` and `primary_conninfo` written), started on a
    /// free port. It follows this cluster by streaming replication and answers reads only;
    /// stopped at process exit at the latest. This cluster's initdb allows replication
    /// connections from 127.0.0.1 and its `wal_level` is `replica`, the defaults.
    public func startStandby() throws -> LocalCluster {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent(
            "push-tests-standby-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        ).path
        try FileManager.default.createDirectory(atPath: "\(root)/run", withIntermediateDirectories: true)
        if let runAs { try Self.run("/bin/chown", ["-R", runAs, root]) }
        try Self.run(
            "\(binaries)/pg_basebackup",
            [
                "-D", "\(root)/data", "-R", "-X", "stream", "--checkpoint=fast", "--no-sync", "-h", "127.0.0.1", "-p", "\(port)", "-U",
                "postgres",
            ], as: runAs)
        let standby = LocalCluster(port: try Self.freePort(), binaries: binaries, root: root, runAs: runAs)
        ClusterCleanup.register(standby)
        try standby.startServer()
        return standby
    }
}

/// A primary of the test's own and a standby made from it with `pg_basebackup -R`, streaming,
/// each holding database `audit`: migrated, with app `wowa`.
public struct ReplicatedDatabase: Sendable {
    public let primary: LocalCluster
    public let standby: LocalCluster
    public let name = "audit"

    public var primaryURL: String { primary.url(database: name) }
    public var standbyURL: String { standby.url(database: name) }

    /// Runs `body` once the standby has replayed a commit of its own (a standby that has replayed
    /// nothing since it started cannot say how far behind it is); both stopped after.
    public static func with<T: Sendable>(_ body: @Sendable (ReplicatedDatabase) async throws -> T) async throws -> T {
        let logger = Logger(label: "replicated-database") { StreamLogHandler.standardError(label: $0) }
        let primary = try LocalCluster.start()
        defer { primary.stop() }
        try await TestPostgres.withClient(url: primary.url()) { _ = try await $0.query("CREATE DATABASE audit") }
        try await TestPostgres.withClient(url: primary.url(database: "audit")) { client in
            try await MigrationRunner.bundled().run(on: client, logger: logger)
            _ = try await AppDirectory(client: client, logger: logger).add(code: "wowa", name: "Wowa", serviceAccount: nil)
        }
        let standby = try primary.startStandby()
        defer { standby.stop() }
        let replicated = ReplicatedDatabase(primary: primary, standby: standby)
        try await replicated.onPrimary { _ = try await $0.query("UPDATE apps SET updated_at = now()") }
        let deadline = ContinuousClock.now + .seconds(20)
        while try await replicated.onStandby({ try await count($0, "SELECT count(*)::int WHERE pg_last_xact_replay_timestamp() IS NULL") })
            == 1
        {
            guard ContinuousClock.now < deadline else { throw Failure(description: "the standby replayed nothing within 20 s") }
            try await Task.sleep(for: .milliseconds(50))
        }
        return try await body(replicated)
    }

    public func onStandby<T: Sendable>(_ body: @Sendable (PostgresClient) async throws -> T) async throws -> T {
        try await TestPostgres.withClient(url: standbyURL, body)
    }

    public func onPrimary<T: Sendable>(_ body: @Sendable (PostgresClient) async throws -> T) async throws -> T {
        try await TestPostgres.withClient(url: primaryURL, body)
    }

    /// Holds the standby's replay: what the primary writes from now on arrives and is not applied.
    public func pauseReplay() async throws {
        try await onStandby { _ = try await $0.query("SELECT pg_wal_replay_pause()") }
    }

    public func resumeReplay() async throws {
        try await onStandby { _ = try await $0.query("SELECT pg_wal_replay_resume()") }
    }

    struct Failure: Error, CustomStringConvertible {
        let description: String
    }
}
