import DeviceRegistry
import Foundation
import Logging
import PostgresNIO
import Synchronization

#if canImport(Glibc)
    import Glibc
    import ServiceSupport
#endif

/// The PostgreSQL the tests run against: `TEST_DATABASE_URL` when given, otherwise a throwaway
/// cluster started on first use (as an unprivileged user when running as root, because
/// `postgres` refuses root) and stopped when the test process exits.
///
/// The schema is migrated once into a template database; every test gets its own copy
/// (`CREATE DATABASE … TEMPLATE …`), which keeps tests isolated and fast.
public actor TestPostgres {
    public static let shared = TestPostgres()

    /// Started once and shared: tests call in concurrently, and an actor is reentrant at `await`.
    private var server: Task<Server, any Error>?
    private var counter = 0
    private let templateName = "push_template_\(getpid())"

    struct Server {
        /// Connection URL without a database name; `adminDatabase` is where CREATE DATABASE runs.
        let host: String
        let port: Int
        let user: String
        let password: String?
        let adminDatabase: String
        /// The UTC day before the template was migrated: its delivery partitions run from then
        /// to a week ahead.
        var templateDay = ""

        func url(database: String) -> String {
            let credentials = password.map { "\(user):\($0)" } ?? user
            return "postgres://\(credentials)@\(host):\(port)/\(database)?sslmode=disable"
        }
    }

    /// A fresh, migrated database for one test.
    public func makeDatabase() async throws -> TestDatabase {
        try await copy(of: templateName, prefix: "t")
    }

    /// An empty database (no migrations), for testing the migration runner itself.
    public func makeEmptyDatabase() async throws -> TestDatabase {
        try await copy(of: "template0", prefix: "e")
    }

    private func copy(of template: String, prefix: String) async throws -> TestDatabase {
        let server = try await ensureServer()
        counter += 1
        let name = "\(prefix)_\(getpid())_\(counter)"
        try await Self.withClient(url: server.url(database: server.adminDatabase)) { client in
            _ = try await client.query("CREATE DATABASE \(unescaped: name) TEMPLATE \(unescaped: template)")
        }
        let database = TestDatabase(url: server.url(database: name), name: name)
        if template == templateName && Self.utcDay() != server.templateDay {
            // Past midnight the template lacks the newest day a migration would make (a week
            // ahead): made here as a worker would, so that each copy is a database migrated today.
            try await Self.withClient(url: database.url) { client in
                _ = try await client.query("SELECT count(*) FROM push_ensure_delivery_partitions()")
            }
        }
        return database
    }

    private static func utcDay() -> String {
        Date().formatted(Date.ISO8601FormatStyle(timeZone: .gmt).year().month().day())
    }

    private func ensureServer() async throws -> Server {
        if let server { return try await server.value }
        let templateName = self.templateName
        let starting = Task { try await Self.startServer(templateName: templateName) }
        server = starting
        return try await starting.value
    }

    private static func startServer(templateName: String) async throws -> Server {
        var server: Server
        if let url = ProcessInfo.processInfo.environment["TEST_DATABASE_URL"], !url.isEmpty {
            let configuration = try DatabaseConfiguration.parse(url)
            server = Server(
                host: configuration.host ?? "127.0.0.1", port: configuration.port ?? 5432,
                user: configuration.username, password: configuration.password,
                adminDatabase: configuration.database ?? "postgres")
        } else {
            server = try LocalCluster.start().server
        }
        // The template must have no open connections when it is copied: migrate with a client
        // that is shut down before the first copy.
        try await Self.withClient(url: server.url(database: server.adminDatabase)) { client in
            try await client.query("DROP DATABASE IF EXISTS \(unescaped: templateName)")
            _ = try await client.query("CREATE DATABASE \(unescaped: templateName) TEMPLATE template0")
        }
        server.templateDay = utcDay()
        _ = try await Self.withClient(url: server.url(database: templateName)) { client in
            try await MigrationRunner.bundled().run(on: client, logger: Logger(label: "test-migrations"))
        }
        return server
    }

    /// Runs `body` with a client whose connections are all closed when it returns.
    public static func withClient<T: Sendable>(url: String, _ body: @Sendable (PostgresClient) async throws -> T) async throws -> T {
        // The body may lease before the child task has started run(): the pool waits for it, but
        // warns once per lease, hundreds of lines per test run.
        var quiet = Logger(label: "test-postgres")
        quiet.logLevel = .error
        let client = PostgresClient(configuration: try DatabaseConfiguration.parse(url), backgroundLogger: quiet)
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

    public init(url: String, name: String) {
        self.url = url
        self.name = name
    }

    public func withClient<T: Sendable>(_ body: @Sendable (PostgresClient) async throws -> T) async throws -> T {
        try await TestPostgres.withClient(url: url, body)
    }

    /// The URL with a pool of at most `poolMax` connections: for tests that need their
    /// statements on one connection, or queued for few.
    public func url(poolMax: Int) -> String {
        url + (url.contains("?") ? "&" : "?") + "pool_max=\(poolMax)"
    }

    /// Ends every other client session on this database every 50 ms until `deadline`
    /// (pg_terminate_backend, as a failover or an operator would); how many it ended.
    @discardableResult
    public func endSessions(until deadline: ContinuousClock.Instant) async throws -> Int {
        try await withClient { client in
            var ended = 0
            while ContinuousClock.now < deadline {
                ended += try await count(
                    client,
                    """
                    SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))::int FROM pg_stat_activity
                     WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
                    """)
                try await Task.sleep(for: .milliseconds(50))
            }
            return ended
        }
    }
}

/// A PostgreSQL cluster from the Debian binaries in a temporary folder, on 127.0.0.1, durability
/// off (a test cluster never needs to survive a crash). Stopped at process exit at the latest.
public final class LocalCluster: Sendable {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    public let port: Int
    let binaries: String
    let root: String
    let runAs: String?

    init(port: Int, binaries: String, root: String, runAs: String?) {
        self.port = port
        self.binaries = binaries
        self.root = root
        self.runAs = runAs
    }

    public func url(database: String = "postgres") -> String {
        "postgres://postgres@127.0.0.1:\(port)/\(database)?sslmode=disable"
    }

    var server: TestPostgres.Server {
        TestPostgres.Server(host: "127.0.0.1", port: port, user: "postgres", password: nil, adminDatabase: "postgres")
    }

    /// initdb and start; on `port` when given (e.g. to bring a database back on the port a
    /// service is already configured for), otherwise on a free one.
    public static func start(port requestedPort: Int? = nil) throws -> LocalCluster {
        let binaries = try binDirectory()
        let root = FileManager.default.temporaryDirectory.appendingPathComponent(
            "push-tests-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        ).path
        try FileManager.default.createDirectory(atPath: "\(root)/run", withIntermediateDirectories: true)
        let runAs: String? = getuid() == 0 ? try unprivilegedUser() : nil
        if let runAs { try run("/bin/chown", ["-R", runAs, root]) }
        try run(
            "\(binaries)/initdb", ["-D", "\(root)/data", "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions"],
            as: runAs)
        let cluster = LocalCluster(port: try requestedPort ?? freePort(), binaries: binaries, root: root, runAs: runAs)
        ClusterCleanup.register(cluster)
        try cluster.startServer()
        return cluster
    }

    func startServer() throws {
        let options =
            "-p \(port) -k \(root)/run -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=400 -c shared_buffers=128MB"
        try Self.run(
            "\(binaries)/pg_ctl", ["-D", "\(root)/data", "-o", options, "-l", "\(root)/postgres.log", "-w", "-t", "60", "start"], as: runAs)
    }

    /// Starts the stopped server again on the same port and data.
    public func restart() throws {
        try startServer()
    }

    /// Immediate shutdown: connections drop as they would when a database host dies.
    public func stop() {
        _ = try? Self.run("\(binaries)/pg_ctl", ["-D", "\(root)/data", "-m", "immediate", "stop"], as: runAs)
    }

    /// Stops the server and its backends in their tracks (SIGSTOP), as a hung host or a network
    /// partition looks to a client: connections stay open and nothing answers.
    public func freeze() { signalServer(SIGSTOP) }

    /// Lets a frozen server go on.
    public func thaw() { signalServer(SIGCONT) }

    private func signalServer(_ signal: Int32) {
        guard let pidFile = try? String(contentsOfFile: "\(root)/data/postmaster.pid", encoding: .utf8),
            let postmaster = pidFile.split(separator: "\n").first.flatMap({ Int32($0) })
        else { return }
        kill(postmaster, signal)
        // The backends: every process whose parent is the postmaster (field 4 of /proc/<pid>/stat).
        for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
            guard let pid = Int32(entry), let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
                let afterName = stat.range(of: ") ", options: .backwards)
            else { continue }
            let fields = stat[afterName.upperBound...].split(separator: " ")
            if fields.count > 1, Int32(fields[1]) == postmaster { kill(pid, signal) }
        }
    }

    func destroy() {
        thaw()
        stop()
        try? FileManager.default.removeItem(atPath: root)
    }

    static func binDirectory() throws -> String {
        let candidates = ((try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? [])
            .sorted { (Int($0) ?? 0) > (Int($1) ?? 0) }
            .map { "/usr/lib/postgresql/\($0)/bin" }
        guard let directory = candidates.first(where: { FileManager.default.isExecutableFile(atPath: "\($0)/initdb") }) else {
            throw Failure(
                description:
                    "PostgreSQL server binaries not found under /usr/lib/postgresql (apt-get install postgresql), or set TEST_DATABASE_URL")
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

    public static func freePort() throws -> Int {
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

    /// Runs a command to completion and returns its output. posix_spawn + waitpid rather than
    /// Foundation's Process: `pg_ctl start` leaves a daemon behind that inherits the child's
    /// descriptors, and Process waits for those to close, which the daemon never does.
    @discardableResult
    static func run(_ executable: String, _ arguments: [String], as user: String? = nil) throws -> String {
        let argv = user.map { ["/usr/sbin/runuser", "-u", $0, "--", executable] + arguments } ?? [executable] + arguments
        let outputPath = FileManager.default.temporaryDirectory.appendingPathComponent("push-tests-output-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: outputPath) }

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputPath, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        var cArguments = argv.map { strdup($0) } + [nil]
        defer { for argument in cArguments { free(argument) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, argv[0], &actions, nil, &cArguments, environ)
        guard spawned == 0 else { throw Failure(description: "cannot start \(argv[0]): error \(spawned)") }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
        let text = (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? ""
        // WIFEXITED && WEXITSTATUS == 0, spelled out: the C macros are not imported.
        guard status & 0x7f == 0, (status >> 8) & 0xff == 0 else {
            throw Failure(description: "\(argv.joined(separator: " ")) failed: \(text)")
        }
        return text
    }
}

/// Stops every cluster the tests started when the test process exits.
enum ClusterCleanup {
    private static let clusters = Mutex<[LocalCluster]>([])

    static func register(_ cluster: LocalCluster) {
        let first = clusters.withLock { list in
            list.append(cluster)
            return list.count == 1
        }
        if first {
            atexit { for cluster in ClusterCleanup.clusters.withLock({ $0 }) { cluster.destroy() } }
        }
    }
}

/// The one integer a query answers (a `count(*)`), 0 when it answers no row.
public func count(_ client: PostgresClient, _ query: PostgresQuery) async throws -> Int {
    for try await value in try await client.query(query).decode(Int.self) { return value }
    return 0
}
