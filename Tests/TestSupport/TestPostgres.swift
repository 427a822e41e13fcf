import DeviceRegistry
import Foundation
import Logging
import PostgresNIO
#if canImport(Glibc)
import Glibc
#endif

/// The PostgreSQL the tests run against: `TEST_DATABASE_URL` when given, otherwise a throwaway
/// cluster started on first use (as an unprivileged user when running as root, because
/// `postgres` refuses root) and stopped when the test process exits.
///
/// The schema is migrated once into a template database; every test gets its own copy
/// (`CREATE DATABASE … TEMPLATE …`), which keeps tests isolated and fast.
public actor TestPostgres {
    public static let shared = TestPostgres()

    private var server: Server?
    private var counter = 0
    private let templateName = "push_template_\(getpid())"

    struct Server {
        /// Connection URL without a database name; `adminDatabase` is where CREATE DATABASE runs.
        let host: String
        let port: Int
        let user: String
        let password: String?
        let adminDatabase: String

        func url(database: String) -> String {
            let credentials = password.map { "\(user):\($0)" } ?? user
            return "postgres://\(credentials)@\(host):\(port)/\(database)?sslmode=disable"
        }
    }

    /// A fresh, migrated database for one test.
    public func makeDatabase() async throws -> TestDatabase {
        let server = try await ensureServer()
        counter += 1
        let name = "t_\(getpid())_\(counter)"
        try await Self.withClient(url: server.url(database: server.adminDatabase)) { client in
            _ = try await client.query("CREATE DATABASE \(unescaped: name) TEMPLATE \(unescaped: templateName)")
        }
        return TestDatabase(url: server.url(database: name), name: name)
    }

    /// An empty database (no migrations), for testing the migration runner itself.
    public func makeEmptyDatabase() async throws -> TestDatabase {
        let server = try await ensureServer()
        counter += 1
        let name = "e_\(getpid())_\(counter)"
        try await Self.withClient(url: server.url(database: server.adminDatabase)) { client in
            _ = try await client.query("CREATE DATABASE \(unescaped: name) TEMPLATE template0")
        }
        return TestDatabase(url: server.url(database: name), name: name)
    }

    private func ensureServer() async throws -> Server {
        if let server { return server }
        let server: Server
        if let url = ProcessInfo.processInfo.environment["TEST_DATABASE_URL"], !url.isEmpty {
            let configuration = try DatabaseConfiguration.parse(url)
            server = Server(host: configuration.host ?? "127.0.0.1", port: configuration.port ?? 5432,
                            user: configuration.username, password: configuration.password,
                            adminDatabase: configuration.database ?? "postgres")
        } else {
            server = try ThrowawayCluster.start()
        }
        // The template must have no open connections when it is copied: migrate with a client
        // that is shut down before the first copy.
        try await Self.withClient(url: server.url(database: server.adminDatabase)) { client in
            try await client.query("DROP DATABASE IF EXISTS \(unescaped: templateName)")
            _ = try await client.query("CREATE DATABASE \(unescaped: templateName) TEMPLATE template0")
        }
        try await Self.withClient(url: server.url(database: templateName)) { client in
            try await MigrationRunner.bundled().run(on: client, logger: Logger(label: "test-migrations"))
        }
        self.server = server
        return server
    }

    /// Runs `body` with a client whose connections are all closed when it returns.
    public static func withClient<T: Sendable>(url: String, _ body: @Sendable (PostgresClient) async throws -> T) async throws -> T {
        let client = PostgresClient(configuration: try DatabaseConfiguration.parse(url), backgroundLogger: Logger(label: "test-postgres"))
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            return try await body(client)
        }
    }
}

/// One test's database.
public struct TestDatabase: Sendable {
    public let url: String
    public let name: String

    public func withClient<T: Sendable>(_ body: @Sendable (PostgresClient) async throws -> T) async throws -> T {
        try await TestPostgres.withClient(url: url, body)
    }
}

/// Starts PostgreSQL from the Debian binaries in a temporary folder, on 127.0.0.1 and a free
/// port, durability off (a test cluster never needs to survive a crash).
enum ThrowawayCluster {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    static func start() throws -> TestPostgres.Server {
        let binaries = try binDirectory()
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("push-tests-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        let data = root.appendingPathComponent("data").path
        let sockets = root.appendingPathComponent("run").path
        try FileManager.default.createDirectory(atPath: sockets, withIntermediateDirectories: true)
        let runAs: String? = getuid() == 0 ? try unprivilegedUser() : nil
        if let runAs { try run("/bin/chown", ["-R", runAs, root.path]) }

        try run("\(binaries)/initdb", ["-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions"], as: runAs)
        let port = try freePort()
        let options = "-p \(port) -k \(sockets) -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=400 -c shared_buffers=128MB"
        try run("\(binaries)/pg_ctl", ["-D", data, "-o", options, "-l", root.appendingPathComponent("postgres.log").path, "-w", "-t", "60", "start"], as: runAs)
        ClusterCleanup.register(pgCtl: "\(binaries)/pg_ctl", data: data, root: root.path, runAs: runAs)
        return TestPostgres.Server(host: "127.0.0.1", port: port, user: "postgres", password: nil, adminDatabase: "postgres")
    }

    static func binDirectory() throws -> String {
        let candidates = ((try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? [])
            .sorted { (Int($0) ?? 0) > (Int($1) ?? 0) }
            .map { "/usr/lib/postgresql/\($0)/bin" }
        guard let directory = candidates.first(where: { FileManager.default.isExecutableFile(atPath: "\($0)/initdb") }) else {
            throw Failure(description: "PostgreSQL server binaries not found under /usr/lib/postgresql (apt-get install postgresql), or set TEST_DATABASE_URL")
        }
        return directory
    }

    static func unprivilegedUser() throws -> String {
        let name = "pushtest"
        if getpwnam(name) == nil {
            try run("/usr/sbin/useradd", ["--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name])
        }
        return name
    }

    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket() failed") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { throw Failure(description: "cannot find a free port") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    @discardableResult
    static func run(_ executable: String, _ arguments: [String], as user: String? = nil) throws -> String {
        let process = Process()
        if let user {
            process.executableURL = URL(fileURLWithPath: "/usr/sbin/runuser")
            process.arguments = ["-u", user, "--", executable] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = arguments
        }
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let text = String(decoding: data, as: UTF8.self)
        guard process.terminationStatus == 0 else {
            throw Failure(description: "\(executable) \(arguments.joined(separator: " ")) failed: \(text)")
        }
        return text
    }
}

/// Stops the throwaway cluster when the test process exits.
enum ClusterCleanup {
    nonisolated(unsafe) private static var command: (pgCtl: String, data: String, root: String, runAs: String?)?

    static func register(pgCtl: String, data: String, root: String, runAs: String?) {
        command = (pgCtl, data, root, runAs)
        atexit {
            guard let command = ClusterCleanup.command else { return }
            _ = try? ThrowawayCluster.run(command.pgCtl, ["-D", command.data, "-m", "immediate", "stop"], as: command.runAs)
            try? FileManager.default.removeItem(atPath: command.root)
        }
    }
}
