import ArgumentParser
import FCMEmulator
import Foundation

struct FCMEmulatorCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fcm-emulator",
        abstract: "A fake FCM HTTP v1 API and Google OAuth 2 token endpoint on loopback (HTTP/2 + TLS).",
        discussion: """
            On start it prints one line of settings for a sender:
              FCM_BASE_URL=https://127.0.0.1:PORT
              GOOGLE_TOKEN_URL=https://127.0.0.1:PORT/token PUSH_CA_FILE=/abs/ca.pem
            (all on one line). The TLS certificate authority is generated at
            every start and written to --ca-out.

            Service accounts: only accounts registered with --service-account,
            --demo-service-account or the admin API may mint tokens, each for its
            own project_id. --demo-service-account FILE generates FILE when it does
            not exist: a fresh RSA-2048 service account of project demo-project
            (client_email push-demo@demo-project.iam.gserviceaccount.com), written
            with mode 0600 in the shape of a Google service-account JSON key, so a
            sender can be given the same file (pushctl app add --service-account
            FILE). An existing FILE is reused, so the pair survives restarts;
            scripts/run uses this for its demo mode.

            Endpoints:
              POST /token       JWT-bearer grant: an RS256 assertion signed by a
                                registered service account
              POST /v1/projects/{project}/messages:send
                                FCM HTTP v1 send, Bearer access token from /token

            Default token prefix rules (off with --no-default-prefixes):
              unregistered-*  404 NOT_FOUND, errorCode UNREGISTERED
              invalid-*       400 INVALID_ARGUMENT about the registration token
              mismatch-*      403 PERMISSION_DENIED, errorCode SENDER_ID_MISMATCH
              unavailable-*   503 UNAVAILABLE (Retry-After: 1) on the first
                              attempt per token, then success
              slow-*          success after 500 ms
            --prefix-rule PREFIX=OUTCOME adds rules; OUTCOME is one of success,
            unregistered, invalid_token, sender_id_mismatch,
            third_party_auth_error, unavailable, internal, quota_exceeded
            (429 with the FcmError QUOTA_EXCEEDED), rate_limit_exceeded (429 with
            an ErrorInfo RATE_LIMIT_EXCEEDED and no FcmError, as FCM answers a
            spent project quota), slow, unauthenticated, bare_STATUS (e.g.
            bare_400: that status with {} and no error details, as a proxy
            answers). Every other answer is FCM's, from the files in
            Sources/FCMEmulator/FCMAnswers.

            Token endpoint: an assertion may name Google's token URL
            (https://oauth2.googleapis.com/token, as google-auth signs it) or this
            one as its audience, and any scopes; a token whose scopes cover neither
            firebase.messaging nor cloud-platform is refused when it sends (403).

            Modelling real FCM:
              --latency PROFILE  every send that is delivered waits a delay drawn
                   from PROFILE before its answer, e.g. 50%:30ms,39%:60ms,10%:150ms,1%:2s
                   (percentages adding up to 100; delays in ms or s). A scripted
                   slow outcome's delay wins; failures and dry runs never wait.
              --outage-after S --outage-for D  S seconds after start, the emulator
                   is unreachable for D seconds, as when the network path to FCM
                   is lost: open connections are reset at once (no GOAWAY, no
                   answers to requests in flight; sends already admitted are
                   still delivered), new ones are reset before TLS.
              --max-concurrent-streams N  the SETTINGS_MAX_CONCURRENT_STREAMS
                   HTTP/2 connections advertise (default 100); streams beyond it
                   are refused with RST_STREAM REFUSED_STREAM.
              --streams-per-connection N  GOAWAY after N streams.

            Admin API (no authentication: a loopback test tool):
              POST /emulator/service-accounts  {"client_email", "project_id",
                   "public_key" or "private_key", "private_key_id"?}
              POST /emulator/script  {"token" or "token_prefix", "outcome",
                   "times"?, "retry_after"?, "delay_ms"?}
              POST /emulator/token-failures  {"count", "status"?}
                   the next token requests fail (default status 503)
              POST /emulator/revoke-access-tokens
              POST /emulator/latency  {"profile": "50%:30ms,..."} or
                   {"profile": null} to answer at once again
              POST /emulator/outage  {"seconds"}  answers 202, then the
                   emulator, this API included, is unreachable for that long
              GET  /emulator/stats[?devices=false]  counters, among them
                   accepted and distinct_accepted_tokens (the difference counts
                   duplicate deliveries), outage_refused_connections and
                   outage_dropped_streams (requests cut unanswered)
              GET  /emulator/messages[?token=TOKEN]  recently accepted messages
              POST /emulator/reset  forget scripts, counters, messages, tokens

            Stops gracefully on SIGTERM or SIGINT.
            """
    )

    @Option(help: "Address to listen on.")
    var host = "127.0.0.1"

    @Option(help: "Port to listen on; 0 picks a free one.")
    var port = 0

    @Flag(
        name: .customLong("no-tls"), help: "Serve plain HTTP/1.1 instead of HTTP/1.1 + HTTP/2 over TLS (push-worker sends only over TLS).")
    var noTLS = false

    @Option(name: .customLong("ca-out"), help: "Where to write the generated CA certificate (PEM).")
    var caOut = "./fcm-emulator-ca.pem"

    @Option(name: .customLong("token-lifetime"), help: "Access token lifetime in seconds.")
    var tokenLifetime = 3600

    @Option(
        name: .customLong("service-account"),
        help: ArgumentHelp(
            "A Google service-account JSON file whose account may mint tokens for its project_id (repeatable).",
            valueName: "file"
        )
    )
    var serviceAccountFiles: [String] = []

    @Option(
        name: .customLong("demo-service-account"),
        help: ArgumentHelp(
            "Like --service-account, but first generate the file (project demo-project, mode 0600) when it does not exist.",
            valueName: "file"
        )
    )
    var demoServiceAccountFile: String?

    @Option(
        name: .customLong("prefix-rule"),
        help: ArgumentHelp("Script every token starting with PREFIX (repeatable).", valueName: "prefix=outcome")
    )
    var prefixRules: [String] = []

    @Flag(
        name: .customLong("no-default-prefixes"),
        help: "Do not install the default prefix rules (unregistered-, invalid-, mismatch-, unavailable-, slow-).")
    var noDefaultPrefixes = false

    @Option(name: .customLong("retain-messages"), help: "How many accepted messages to keep for GET /emulator/messages.")
    var retainedMessages = 1000

    @Option(
        name: .customLong("streams-per-connection"),
        help: ArgumentHelp(
            "End each HTTP/2 connection with GOAWAY after N streams, as Google's front ends end connections now and then (default: never).",
            valueName: "n"))
    var streamsPerConnection: Int?

    @Option(
        name: .customLong("max-concurrent-streams"),
        help: ArgumentHelp(
            "The SETTINGS_MAX_CONCURRENT_STREAMS HTTP/2 connections advertise; streams beyond it are refused.", valueName: "n"))
    var maxConcurrentStreams = 100

    @Option(
        help: ArgumentHelp(
            "Answer each delivered send after a delay drawn from PROFILE, e.g. 50%:30ms,39%:60ms,10%:150ms,1%:2s.",
            valueName: "profile"),
        transform: { text throws(LatencyProfileError) in try LatencyProfile(parsing: text) })
    var latency: LatencyProfile?

    @Option(
        name: .customLong("outage-after"),
        help: ArgumentHelp("Begin an outage this many seconds after start (with --outage-for).", valueName: "seconds"))
    var outageAfter: Double?

    @Option(
        name: .customLong("outage-for"),
        help: ArgumentHelp("How long the outage of --outage-after lasts: connections are reset, new ones refused.", valueName: "seconds"))
    var outageFor: Double?

    func validate() throws {
        guard (0...65535).contains(port) else { throw ValidationError("--port must be between 0 and 65535") }
        guard tokenLifetime > 0 else { throw ValidationError("--token-lifetime must be positive") }
        guard retainedMessages >= 0 else { throw ValidationError("--retain-messages must not be negative") }
        if let streamsPerConnection, streamsPerConnection < 1 { throw ValidationError("--streams-per-connection must be at least 1") }
        guard (1...Int(UInt32.max)).contains(maxConcurrentStreams) else {
            throw ValidationError("--max-concurrent-streams must be between 1 and \(UInt32.max)")
        }
        switch (outageAfter, outageFor) {
        case (nil, nil): break
        case (let after?, let duration?):
            guard (0...Self.longestWait).contains(after) else {
                throw ValidationError("--outage-after must be from 0 to \(Int(Self.longestWait)) seconds")
            }
            guard (0...Self.longestWait).contains(duration) else {
                throw ValidationError("--outage-for must be from 0 to \(Int(Self.longestWait)) seconds")
            }
        default: throw ValidationError("--outage-after and --outage-for go together")
        }
    }

    /// A day: longer is surely a mistake, and keeps the arithmetic on durations safe.
    private static let longestWait = 86_400.0

    func run() async throws {
        let listening = ListeningFlag()
        do {
            try await serve(listening)
        } catch let error as ValidationError {
            throw error  // a bad argument: ArgumentParser shows it with the usage
        } catch let error as StartupError {
            throw Self.fail(error.message)
        } catch {
            let text = "\(error)"
            if listening.isSet { throw Self.fail(text) }
            // NIO's bind error reads "bind(descriptor:ptr:bytes:): Address already in use) (errno: 98)".
            if text.contains("Address already in use") {
                throw Self.fail("\(host):\(port) is already in use (choose another --port, or 0 for a free one)")
            }
            throw Self.fail("cannot start on \(host):\(port): \(text)")
        }
    }

    private func serve(_ listening: ListeningFlag) async throws {
        var serviceAccountFiles = serviceAccountFiles
        if let demoServiceAccountFile {
            try Self.ensureDemoServiceAccount(at: demoServiceAccountFile)
            serviceAccountFiles.append(demoServiceAccountFile)
        }
        var configuration = FCMEmulator.Configuration(
            host: host,
            port: port,
            tls: !noTLS,
            tokenLifetime: .seconds(tokenLifetime),
            serviceAccounts: try serviceAccountFiles.map(Self.readServiceAccount),
            prefixRules: try prefixRules.map(Self.parsePrefixRule) + (noDefaultPrefixes ? [] : PrefixRule.standard),
            retainedMessageLimit: retainedMessages,
            streamsPerConnection: streamsPerConnection,
            maxConcurrentStreams: maxConcurrentStreams,
            latency: latency
        )
        let caURL = URL(fileURLWithPath: caOut).standardizedFileURL
        if configuration.tls {
            let folder = caURL.deletingLastPathComponent().path
            guard FileManager.default.isWritableFile(atPath: folder) else {
                throw StartupError("--ca-out \(caOut): cannot write to the folder \(folder)")
            }
            configuration.caFilePath = caURL.path
        }

        let (started, startedContinuation) = AsyncStream.makeStream(of: RunningEmulator.self)
        let emulator = FCMEmulator(configuration: configuration) { running in
            listening.set()
            let settings = "FCM_BASE_URL=\(running.baseURL) GOOGLE_TOKEN_URL=\(running.tokenURL) PUSH_CA_FILE=\(running.caFilePath ?? "")\n"
            // Unbuffered, so that a script reading our stdout sees the line at once.
            FileHandle.standardOutput.write(Data(settings.utf8))
            startedContinuation.yield(running)
            startedContinuation.finish()
        }
        try await withThrowingDiscardingTaskGroup { group in
            if let outageAfter, let outageFor {
                group.addTask {
                    for await running in started {
                        // Cancelled when the emulator stops first.
                        guard (try? await Task.sleep(for: .seconds(outageAfter))) != nil else { return }
                        running.beginOutage(for: .seconds(outageFor))
                    }
                }
            }
            defer { startedContinuation.finish() }
            try await emulator.runService()
            group.cancelAll()
        }
    }

    /// A startup failure is one line on stderr and exit status 1, never a usage text or a stack trace.
    private static func fail(_ message: String) -> ExitCode {
        FileHandle.standardError.write(Data("fcm-emulator: \(message)\n".utf8))
        return ExitCode.failure
    }

    static let demoProjectID = "demo-project"
    static let demoClientEmail = "push-demo@demo-project.iam.gserviceaccount.com"

    /// Generates a demo service account at `path` unless a file is already there. The key is written to a
    /// private temporary file (mode 0600 from the start) and linked into place, so a reader never sees a
    /// half-written file and a concurrent start never overwrites another's key.
    private static func ensureDemoServiceAccount(at path: String) throws {
        guard !FileManager.default.fileExists(atPath: path) else { return }
        let fixture: ServiceAccountFixture
        do {
            fixture = try ServiceAccountFixture.generate(projectID: demoProjectID, clientEmail: demoClientEmail)
        } catch {
            throw StartupError("cannot generate a demo service account: \(error)")
        }
        let contents = Data((fixture.json() + "\n").utf8)
        let temporary = "\(path).tmp-\(getpid())"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL, 0o600)
        guard descriptor >= 0 else {
            throw StartupError("cannot write the demo service account \(path): \(String(cString: strerror(errno)))")
        }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        defer { unlink(temporary) }
        do {
            try handle.write(contentsOf: contents)
            try handle.synchronize()
            try handle.close()
        } catch {
            throw StartupError("cannot write the demo service account \(path): \(error.localizedDescription)")
        }
        if link(temporary, path) != 0 {
            let error = errno
            if error == EEXIST { return }  // another start won the race: use its file
            throw StartupError("cannot write the demo service account \(path): \(String(cString: strerror(error)))")
        }
        FileHandle.standardError.write(
            Data(
                "fcm-emulator: generated demo service account \(demoClientEmail) (project \(demoProjectID)) in \(path)\n".utf8))
    }

    private static func readServiceAccount(path: String) throws -> RegisteredAccount {
        let contents: Data
        do {
            contents = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw StartupError("cannot read service account \(path): \(error.localizedDescription)")
        }
        do {
            return try RegisteredAccount(serviceAccountJSON: contents)
        } catch {
            throw StartupError("service account \(path): \(error)")
        }
    }

    private static func parsePrefixRule(_ text: String) throws -> PrefixRule {
        let parts = text.split(separator: "=", maxSplits: 1)
        guard parts.count == 2, let outcome = Outcome(name: String(parts[1])) else {
            throw ValidationError("--prefix-rule takes PREFIX=OUTCOME with a known outcome, got \(text)")
        }
        return PrefixRule(prefix: String(parts[0]), outcome: outcome)
    }
}

/// A failure to start that is not about the arguments' syntax: a missing file, a port in use.
struct StartupError: Error {
    let message: String
    init(_ message: String) { self.message = message }
}

/// Set once the emulator listens: failures before that are failures to start.
final class ListeningFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false

    var isSet: Bool { lock.withLock { value } }
    func set() { lock.withLock { value = true } }
}

/// Top-level code picks ParsableCommand's synchronous `main()`; an async function gets the async one.
func runCommand() async {
    await FCMEmulatorCommand.main()
}

await runCommand()
