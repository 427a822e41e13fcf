import Foundation
import Logging
import ServiceSupport
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A throwaway PgBouncer (Debian's pgbouncer: 1.18 on bookworm, which keeps no named prepared
/// statement across transactions) on 127.0.0.1 in transaction pooling mode, in front of the
/// PostgreSQL server a test database lives on: the pooler operators put in front of PostgreSQL,
/// to run the programs through.
///
/// It runs in the foreground as a child of the test process, its configuration, user list and
/// log in one temporary folder. PgBouncer refuses to run as root: as root it switches to the
/// test cluster's unprivileged user (`-u`), who owns the folder.
public final class PgBouncer: Sendable {
    public static let executable = "/usr/sbin/pgbouncer"

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    public let port: Int
    /// Server connections per database and user: fewer than a program's pool, so its
    /// transactions share them.
    public let poolSize: Int
    public let directory: String
    private let process: Process

    private init(port: Int, poolSize: Int, directory: String, process: Process) {
        self.port = port
        self.poolSize = poolSize
        self.directory = directory
        self.process = process
    }

    /// `database` through PgBouncer, as a program's DATABASE_URL says it: `?pooler=transaction`.
    public func url(for database: TestDatabase) -> String {
        "postgres://postgres@127.0.0.1:\(port)/\(database.name)?sslmode=disable&pooler=transaction"
    }

    public var logPath: String { "\(directory)/pgbouncer.log" }
    public var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }
    public var isRunning: Bool { process.isRunning }

    /// The client log-ins PgBouncer took for `database` (it logs each one).
    public func logins(to database: TestDatabase) -> Int {
        log.split(separator: "\n").filter { $0.contains("login attempt: db=\(database.name) ") }.count
    }

    /// Runs `body` with a PgBouncer in front of `database`'s server, stopped and removed after.
    public static func withRunning<T: Sendable>(
        inFrontOf database: TestDatabase, poolSize: Int = 2, _ body: (PgBouncer) async throws -> T
    ) async throws -> T {
        let bouncer = try await start(inFrontOf: database, poolSize: poolSize)
        let result: Result<T, any Error>
        do { result = .success(try await body(bouncer)) } catch { result = .failure(error) }
        await bouncer.stop()
        if case .failure = result {
            FileHandle.standardError.write(Data("pgbouncer's log is kept in \(bouncer.logPath)\n".utf8))
        } else {
            bouncer.removeFiles()
        }
        return try result.get()
    }

    /// Starts PgBouncer in front of the server `database` is on (any database of it, by name)
    /// and returns once a log-in through it succeeds.
    public static func start(inFrontOf database: TestDatabase, poolSize: Int = 2) async throws -> PgBouncer {
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw Failure(description: "\(executable) not found: apt-get install pgbouncer (scripts/test does it)")
        }
        let server = try DatabaseConfiguration.parse(database.url)
        guard let host = server.host, let serverPort = server.port else {
            throw Failure(description: "PgBouncer is started in front of a TCP server, not \(database.url)")
        }
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("push-tests-pgbouncer-\(getpid())-\(UInt32.random(in: 0...UInt32.max))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        do {
            let runAs: String? = getuid() == 0 ? try LocalCluster.unprivilegedUser() : nil
            // The test cluster trusts its clients; PgBouncer only needs the user listed.
            try "\"\(server.username)\" \"\"\n".write(toFile: "\(directory)/users.txt", atomically: true, encoding: .utf8)
            // The free port can be taken between looking and PgBouncer's bind: look again then.
            var attempt = 0
            while true {
                attempt += 1
                let port = try LocalCluster.freePort()
                let upstream = "host=\(host) port=\(serverPort) user=\(server.username)" + (server.password.map { " password=\($0)" } ?? "")
                try configuration(port: port, upstream: upstream, poolSize: poolSize, directory: directory)
                    .write(toFile: "\(directory)/pgbouncer.ini", atomically: true, encoding: .utf8)
                if let runAs { try LocalCluster.run("/bin/chown", ["-R", runAs, directory]) }
                let bouncer = PgBouncer(
                    port: port, poolSize: poolSize, directory: directory, process: try launch(directory: directory, runAs: runAs))
                ExitCleanup.register(bouncer)
                if try await bouncer.waitUntilServing(database) { return bouncer }
                if attempt < 3 && bouncer.log.contains("Address already in use") { continue }
                throw Failure(description: "pgbouncer did not start: \(bouncer.log)")
            }
        } catch {
            try? FileManager.default.removeItem(atPath: directory)
            throw error
        }
    }

    public func removeFiles() {
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// True once a log-in through PgBouncer succeeds; false when it exited first.
    private func waitUntilServing(_ database: TestDatabase) async throws -> Bool {
        var quiet = Logger(label: "pgbouncer-check")
        quiet.logLevel = .critical
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            if !process.isRunning { return false }
            if (try? await DatabaseReachability.verify(url: url(for: database), limit: .seconds(1), logger: quiet)) != nil { return true }
            try await Task.sleep(for: .milliseconds(50))
        }
        await stop()
        throw Failure(description: "pgbouncer did not answer on 127.0.0.1:\(port) within 10 s: \(log)")
    }

    private static func launch(directory: String, runAs: String?) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = (runAs.map { ["-u", $0] } ?? []) + ["\(directory)/pgbouncer.ini"]
        process.environment = ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"]
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        return process
    }

    /// Transaction pooling, `poolSize` server connections per database, every database of the
    /// upstream server by its own name; each log-in logged. No reset query: transaction mode
    /// never runs one, as deployed.
    static func configuration(port: Int, upstream: String, poolSize: Int, directory: String) -> String {
        """
        ; Written by Tests/TestSupport/PgBouncer.swift for one test run.
        [databases]
        * = \(upstream)

        [pgbouncer]
        listen_addr = 127.0.0.1
        listen_port = \(port)
        unix_socket_dir =
        auth_type = trust
        auth_file = \(directory)/users.txt
        pool_mode = transaction
        default_pool_size = \(poolSize)
        min_pool_size = 0
        reserve_pool_size = 0
        max_client_conn = 1000
        logfile = \(directory)/pgbouncer.log
        log_connections = 1
        log_disconnections = 0
        log_pooler_errors = 1

        """
    }
}

extension PgBouncer: ChildServer {
    public var childProcess: Process { process }
}
