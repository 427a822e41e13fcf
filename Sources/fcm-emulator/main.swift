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
            third_party_auth_error, unavailable, internal, quota_exceeded, slow.

            Admin API (no authentication: a loopback test tool):
              POST /emulator/service-accounts  {"client_email", "project_id",
                   "public_key" or "private_key", "private_key_id"?}
              POST /emulator/script  {"token" or "token_prefix", "outcome",
                   "times"?, "retry_after"?, "delay_ms"?}
              POST /emulator/token-failures  {"count", "status"?}
                   the next token requests fail (default status 503)
              POST /emulator/revoke-access-tokens
              GET  /emulator/stats[?devices=false]
              GET  /emulator/messages[?token=TOKEN]  recently accepted messages
              POST /emulator/reset  forget scripts, counters, messages, tokens

            Stops gracefully on SIGTERM or SIGINT.
            """
    )

    @Option(help: "Address to listen on.")
    var host = "127.0.0.1"

    @Option(help: "Port to listen on; 0 picks a free one.")
    var port = 0

    @Flag(name: .customLong("no-tls"), help: "Serve plain HTTP/1.1 instead of HTTP/1.1 + HTTP/2 over TLS.")
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
        name: .customLong("prefix-rule"),
        help: ArgumentHelp("Script every token starting with PREFIX (repeatable).", valueName: "prefix=outcome")
    )
    var prefixRules: [String] = []

    @Flag(name: .customLong("no-default-prefixes"), help: "Do not install the default prefix rules (unregistered-, invalid-, mismatch-, unavailable-, slow-).")
    var noDefaultPrefixes = false

    @Option(name: .customLong("retain-messages"), help: "How many accepted messages to keep for GET /emulator/messages.")
    var retainedMessages = 1000

    func validate() throws {
        guard (0...65535).contains(port) else { throw ValidationError("--port must be between 0 and 65535") }
        guard tokenLifetime > 0 else { throw ValidationError("--token-lifetime must be positive") }
        guard retainedMessages >= 0 else { throw ValidationError("--retain-messages must not be negative") }
    }

    func run() async throws {
        var configuration = FCMEmulator.Configuration(
            host: host,
            port: port,
            tls: !noTLS,
            tokenLifetime: .seconds(tokenLifetime),
            serviceAccounts: try serviceAccountFiles.map(Self.readServiceAccount),
            prefixRules: try prefixRules.map(Self.parsePrefixRule) + (noDefaultPrefixes ? [] : PrefixRule.standard),
            retainedMessageLimit: retainedMessages
        )
        let caPath = URL(fileURLWithPath: caOut).standardizedFileURL.path
        if configuration.tls { configuration.caFilePath = caPath }

        let emulator = FCMEmulator(configuration: configuration) { running in
            let settings = "FCM_BASE_URL=\(running.baseURL) GOOGLE_TOKEN_URL=\(running.tokenURL) PUSH_CA_FILE=\(running.caFilePath ?? "")\n"
            // Unbuffered, so that a script reading our stdout sees the line at once.
            FileHandle.standardOutput.write(Data(settings.utf8))
        }
        try await emulator.runService()
    }

    private static func readServiceAccount(path: String) throws -> ServiceAccount {
        let contents: Data
        do {
            contents = try Data(contentsOf: URL(fileURLWithPath: path))
        } catch {
            throw ValidationError("cannot read service account \(path): \(error.localizedDescription)")
        }
        do {
            return try ServiceAccount(serviceAccountJSON: contents)
        } catch {
            throw ValidationError("service account \(path): \(error)")
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

/// Top-level code picks ParsableCommand's synchronous `main()`; an async function gets the async one.
func runCommand() async {
    await FCMEmulatorCommand.main()
}

await runCommand()
