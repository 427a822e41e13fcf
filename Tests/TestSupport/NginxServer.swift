import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A throwaway nginx (Debian's nginx-light) on 127.0.0.1, speaking HTTP/2 over TLS with a
/// certificate from its own throwaway CA, and answering FCM HTTP v1 sends with a canned 200:
/// an HTTP/2 server this project did not write, to run push-worker against.
///
/// nginx runs in the foreground (`daemon off`) as a child of the test process, everything it
/// writes (config, keys, pid, logs, temp files) in one temporary folder. As root its workers
/// run as nginx's default unprivileged user (nobody): the master opens the logs and reads the
/// keys before it drops privileges, and it makes its temp and socket paths theirs.
public final class NginxServer: Sendable {
    public static let executable = "/usr/sbin/nginx"

    /// What `send` answers, by FCM's path (`/v1/projects/{project}/messages:send`).
    public static let cannedResponse = #"{"name":"projects/p/messages/0:1"}"#

    public struct Options: Sendable {
        /// `http2_max_concurrent_streams`, the SETTINGS_MAX_CONCURRENT_STREAMS nginx announces;
        /// nil keeps nginx's default, 128.
        public var maxConcurrentStreams: Int?
        /// `keepalive_requests`: after this many streams nginx sends GOAWAY and ends the
        /// connection once they are answered; nil keeps nginx's default, 1,000.
        public var requestsPerConnection: Int?
        /// nginx's `return 200` answers as soon as the request's HEADERS are in, before it has
        /// read the body, and then resets the stream with RST_STREAM(NO_ERROR) (RFC 9113 §8.1).
        /// When true, `send` goes through a `proxy_pass` to an inner server on a Unix socket
        /// instead: the proxy reads the whole body first, so every stream ends normally.
        public var readsRequestBodyFirst: Bool
        /// error.log's level, by default PUSH_TESTS_NGINX_LOG_LEVEL's or info. "debug" (Debian
        /// builds nginx --with-debug) logs every frame, e.g. `http2 send RST_STREAM frame sid:…`.
        public var errorLogLevel: String
        /// What every send is answered: by default 200 with ``cannedResponse``. The body is
        /// written into the configuration as it is: nginx keeps a `\u0000` in it for the
        /// client's JSON parser to read.
        public var answer: (status: Int, body: String)
        /// Sends to these projects are answered 200 with a JSON body of this many bytes, served
        /// from a file (`return` takes a few KiB at most). nginx logs each such answer as
        /// `GET /oversized/PROJECT.json`, the request it is redirected to internally.
        public var oversizedAnswers: [String: Int]

        public init(
            maxConcurrentStreams: Int? = nil, requestsPerConnection: Int? = nil, readsRequestBodyFirst: Bool = false,
            errorLogLevel: String? = nil, answer: (status: Int, body: String) = (200, cannedResponse),
            oversizedAnswers: [String: Int] = [:]
        ) {
            self.maxConcurrentStreams = maxConcurrentStreams
            self.requestsPerConnection = requestsPerConnection
            self.readsRequestBodyFirst = readsRequestBodyFirst
            self.answer = answer
            self.oversizedAnswers = oversizedAnswers
            self.errorLogLevel = errorLogLevel ?? ProcessInfo.processInfo.environment["PUSH_TESTS_NGINX_LOG_LEVEL"] ?? "info"
        }
    }

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    /// One line of the access log.
    public struct LoggedRequest: Sendable, Equatable {
        /// nginx's connection serial number, and this request's number on that connection.
        public let connection: Int
        public let requestOnConnection: Int
        public let method: String
        public let path: String
        public let status: Int
        /// `$request_length`: the request line, headers and the body bytes nginx read.
        public let requestLength: Int
        public let `protocol`: String
    }

    public let port: Int
    /// The folder holding everything of this server; removed by `withRunning` when it ends.
    public let directory: String
    /// The PEM certificate of the CA that signed the server's certificate (for 127.0.0.1 and localhost).
    public let caFilePath: String
    public let options: Options
    private let process: Process

    /// `https://127.0.0.1:PORT`, for FCM_BASE_URL.
    public var baseURL: String { "https://127.0.0.1:\(port)" }
    public var accessLogPath: String { "\(directory)/access.log" }
    public var errorLogPath: String { "\(directory)/error.log" }
    public var errorLog: String { (try? String(contentsOfFile: errorLogPath, encoding: .utf8)) ?? "" }
    public var isRunning: Bool { process.isRunning }

    private init(port: Int, directory: String, caFilePath: String, options: Options, process: Process) {
        self.port = port
        self.directory = directory
        self.caFilePath = caFilePath
        self.options = options
        self.process = process
    }

    /// Starts nginx, stops it and removes its folder when `body` ends (whether it returns or
    /// throws). With PUSH_TESTS_KEEP_NGINX=1 in the environment the folder (config, logs) is kept
    /// for a look, and its path printed.
    public static func withRunning<T: Sendable>(_ options: Options = Options(), _ body: @Sendable (NginxServer) async throws -> T)
        async throws -> T
    {
        let server = try await start(options)
        let result: Result<T, any Error>
        do { result = .success(try await body(server)) } catch { result = .failure(error) }
        await server.stop()
        if ProcessInfo.processInfo.environment["PUSH_TESTS_KEEP_NGINX"] == "1" {
            FileHandle.standardError.write(Data("nginx's files are kept in \(server.directory)\n".utf8))
        } else {
            server.removeFiles()
        }
        return try result.get()
    }

    /// Starts nginx and returns once it accepts connections. Stop it with `stop()`; one still
    /// running when the test process exits is stopped then.
    public static func start(_ options: Options = Options()) async throws -> NginxServer {
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw Failure(description: "\(executable) not found: apt-get install nginx-light (scripts/test does it)")
        }
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("push-tests-nginx-\(getpid())-\(UInt32.random(in: 0...UInt32.max))").path
        try FileManager.default.createDirectory(atPath: "\(directory)/temp", withIntermediateDirectories: true)
        // Workers running as nobody reach the Unix socket of `readsRequestBodyFirst` through it.
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: directory)
        do {
            try makeCertificates(in: directory)
            try writeOversizedAnswers(options.oversizedAnswers, in: directory)
            // The free port can be taken between looking and nginx's bind: look again then.
            var attempt = 0
            while true {
                attempt += 1
                let port = try LocalCluster.freePort()
                try configuration(port: port, directory: directory, options: options)
                    .write(toFile: "\(directory)/nginx.conf", atomically: true, encoding: .utf8)
                let process = try launch(directory: directory)
                let server = NginxServer(
                    port: port, directory: directory, caFilePath: "\(directory)/ca.pem", options: options, process: process)
                ExitCleanup.register(server)
                if try await server.waitUntilAccepting() { return server }
                let log = server.errorLog
                if attempt < 3 && log.contains("Address already in use") { continue }
                throw Failure(description: "nginx did not start: \(log)")
            }
        } catch {
            try? FileManager.default.removeItem(atPath: directory)
            throw error
        }
    }

    public func removeFiles() {
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// A PEM file trusting this server's CA and, when given, the CA in `otherCAFile` (a
    /// program such as push-worker takes one PUSH_CA_FILE, whose certificates are all trusted).
    public func caFile(alsoTrusting otherCAFile: String?) throws -> String {
        var pem = try String(contentsOfFile: caFilePath, encoding: .utf8)
        if let otherCAFile {
            if !pem.hasSuffix("\n") { pem += "\n" }
            pem += try String(contentsOfFile: otherCAFile, encoding: .utf8)
        }
        let path = "\(directory)/trusted-\(UUID().uuidString).pem"
        try pem.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    /// Every request nginx has logged (a request is logged once its answer is written, so stop
    /// nginx first to be sure to see them all).
    public func loggedRequests() throws -> [LoggedRequest] {
        let text = (try? String(contentsOfFile: accessLogPath, encoding: .utf8)) ?? ""
        return try text.split(separator: "\n").map { line in
            // The format is `log_format fcm` in `configuration`: fields without spaces.
            let fields = line.split(separator: " ").map(String.init)
            guard fields.count == 8, let connection = Int(fields[1]), let number = Int(fields[2]), let status = Int(fields[5]),
                let length = Int(fields[6])
            else {
                throw Failure(description: "unexpected access log line: \(line)")
            }
            return LoggedRequest(
                connection: connection, requestOnConnection: number, method: fields[3], path: fields[4],
                status: status, requestLength: length, protocol: fields[7])
        }
    }

    /// The FCM sends (POST …/messages:send) nginx has answered with its canned 200.
    public func answeredSends() throws -> [LoggedRequest] {
        try loggedRequests().filter { $0.method == "POST" && $0.path.hasSuffix("/messages:send") && $0.status == 200 }
    }

    /// The RST_STREAM frames nginx sent, counted by error code (0 is NO_ERROR), and its GOAWAY
    /// frames: read from the debug log, so only with `errorLogLevel` "debug".
    public func sentControlFrames() throws -> (resets: [Int: Int], goAways: Int) {
        guard options.errorLogLevel == "debug" else { throw Failure(description: "nginx's frames are logged at errorLogLevel debug only") }
        var resets: [Int: Int] = [:]
        var goAways = 0
        let log = try String(contentsOfFile: errorLogPath, encoding: .utf8)
        for line in log.split(separator: "\n") where line.contains(" http2 send ") {
            // "… http2 send RST_STREAM frame sid:13, status:0", "… http2 send GOAWAY frame: last sid 1999, error 0"
            if line.contains("send RST_STREAM frame"), let code = line.split(separator: "status:").last.flatMap({ Int($0) }) {
                resets[code, default: 0] += 1
            } else if line.contains("send GOAWAY frame") {
                goAways += 1
            }
        }
        return (resets, goAways)
    }

    // MARK: Starting

    private static func launch(directory: String) throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        // -e: the error log from the first line on (Debian's build default is stderr).
        process.arguments = ["-p", "\(directory)/", "-c", "\(directory)/nginx.conf", "-e", "\(directory)/error.log"]
        process.environment = ["PATH": "/usr/sbin:/usr/bin:/sbin:/bin"]
        let output = "\(directory)/output.log"
        try Data().write(to: URL(fileURLWithPath: output))
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: output))
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = log
        process.standardError = log
        try process.run()
        try? log.close()
        return process
    }

    /// True once a TCP connection to the port succeeds; false when nginx exited first.
    private func waitUntilAccepting() async throws -> Bool {
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline {
            if !process.isRunning { return false }
            if Self.accepts(port: port) { return true }
            try await Task.sleep(for: .milliseconds(20))
        }
        await stop()
        throw Failure(description: "nginx did not listen on 127.0.0.1:\(port) within 10 s: \(errorLog)")
    }

    private static func accepts(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        return withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0 }
        }
    }

    static func configuration(port: Int, directory: String, options: Options) -> String {
        let answer = "default_type application/json;\n            return \(options.answer.status) '\(options.answer.body)';"
        let send =
            options.readsRequestBodyFirst
            // The proxy reads the whole body before it connects upstream; the inner server
            // need not see the body.
            ? "proxy_pass http://unix:\(directory)/inner.sock;\n            proxy_pass_request_body off;\n            proxy_set_header Content-Length \"\";"
            : answer
        let inner =
            options.readsRequestBodyFirst
            ? """

                server {
                    listen unix:\(directory)/inner.sock;
                    access_log off;
                    location / {
                        \(answer)
                    }
                }
            """ : ""
        // A POST to a static file is refused with 405; error_page turns that into the file, as GET.
        let oversized = options.oversizedAnswers.keys.sorted().map { project in
            """

                    location = /v1/projects/\(project)/messages:send {
                        error_page 405 =200 /oversized/\(project).json;
                        return 405;
                    }
            """
        }.joined()
        let oversizedFiles =
            options.oversizedAnswers.isEmpty
            ? ""
            : """

                    location /oversized/ {
                        internal;
                        root \(directory);
                        default_type application/json;
                    }
            """
        return """
            # Written by Tests/TestSupport/NginxServer.swift for one test run.
            daemon off;
            master_process on;
            worker_processes 1;
            pid \(directory)/nginx.pid;
            error_log \(directory)/error.log \(options.errorLogLevel);
            events { worker_connections 1024; }
            http {
                log_format fcm '$msec $connection $connection_requests $request_method $uri $status $request_length $server_protocol';
                access_log \(directory)/access.log fcm;
                client_body_temp_path \(directory)/temp/body;
                proxy_temp_path \(directory)/temp/proxy;
                fastcgi_temp_path \(directory)/temp/fastcgi;
                uwsgi_temp_path \(directory)/temp/uwsgi;
                scgi_temp_path \(directory)/temp/scgi;
                \(options.requestsPerConnection.map { "keepalive_requests \($0);" } ?? "")
                server {
                    listen 127.0.0.1:\(port) ssl http2;
                    ssl_certificate \(directory)/server.pem;
                    ssl_certificate_key \(directory)/server.key;
                    \(options.maxConcurrentStreams.map { "http2_max_concurrent_streams \($0);" } ?? "")\(oversized)\(oversizedFiles)
                    location ~ ^/v1/projects/[^/]+/messages:send$ {
                        \(send)
                    }
                    location / {
                        return 404;
                    }
                }\(inner)
            }

            """
    }

    /// The bodies of `Options.oversizedAnswers`: FCM's answer padded to the size asked for.
    private static func writeOversizedAnswers(_ sizes: [String: Int], in directory: String) throws {
        guard !sizes.isEmpty else { return }
        try FileManager.default.createDirectory(atPath: "\(directory)/oversized", withIntermediateDirectories: true)
        for (project, size) in sizes {
            let head = #"{"name":"projects/\#(project)/messages/0:1","padding":""#
            let body = head + String(repeating: "a", count: max(0, size - head.utf8.count - 2)) + #""}"#
            try body.write(toFile: "\(directory)/oversized/\(project).json", atomically: true, encoding: .utf8)
        }
    }

    /// A CA and a server certificate it signed for 127.0.0.1 and localhost, both P-256, made
    /// with the openssl command (TestSupport has no X.509 library, and needs none for this).
    private static func makeCertificates(in directory: String) throws {
        let config = """
            [req]
            distinguished_name = dn
            prompt = no
            [dn]
            CN = nginx test CA
            [ca]
            basicConstraints = critical, CA:TRUE, pathlen:0
            keyUsage = critical, keyCertSign, cRLSign
            subjectKeyIdentifier = hash
            [server]
            basicConstraints = critical, CA:FALSE
            keyUsage = critical, digitalSignature
            extendedKeyUsage = serverAuth
            subjectAltName = IP:127.0.0.1, DNS:localhost
            subjectKeyIdentifier = hash
            authorityKeyIdentifier = keyid

            """
        try config.write(toFile: "\(directory)/openssl.cnf", atomically: true, encoding: .utf8)
        let key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        let serial = "0x" + (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
        try openssl(
            ["req", "-x509", "-config", "\(directory)/openssl.cnf", "-extensions", "ca"] + key
                + [
                    "-keyout", "\(directory)/ca.key", "-out", "\(directory)/ca.pem", "-days", "7", "-subj",
                    "/O=push-service tests/CN=nginx test CA",
                ])
        try openssl(
            ["req", "-new", "-config", "\(directory)/openssl.cnf"] + key
                + ["-keyout", "\(directory)/server.key", "-out", "\(directory)/server.csr", "-subj", "/CN=127.0.0.1"])
        try openssl([
            "x509", "-req", "-in", "\(directory)/server.csr", "-CA", "\(directory)/ca.pem", "-CAkey", "\(directory)/ca.key",
            "-set_serial", serial, "-days", "7", "-extfile", "\(directory)/openssl.cnf", "-extensions", "server",
            "-out", "\(directory)/server.pem",
        ])
    }

    private static func openssl(_ arguments: [String]) throws {
        guard let path = ["/usr/bin/openssl", "/bin/openssl"].first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw Failure(description: "openssl not found: apt-get install openssl (scripts/test does it)")
        }
        try LocalCluster.run(path, arguments)
    }
}

extension NginxServer: ChildServer {
    public var childProcess: Process { process }
}
