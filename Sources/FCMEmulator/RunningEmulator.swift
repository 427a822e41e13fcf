import Hummingbird
import _CryptoExtras

/// A listening emulator: where to reach it, and the controls tests and benchmarks use to script and inspect it.
/// Every method is synchronous and safe to call from any task while sends are in flight.
public final class RunningEmulator: Sendable {
    /// `https://127.0.0.1:<port>` (or `http://…` without TLS); use as `FCM_BASE_URL`.
    public let baseURL: String
    public let port: Int
    /// The CA that signed the server certificate, PEM; nil without TLS.
    public let caCertificatePEM: String?
    /// A file holding ``caCertificatePEM``, for `PUSH_CA_FILE`; nil without TLS.
    public let caFilePath: String?
    private let core: EmulatorCore

    /// The OAuth 2 token endpoint, `<baseURL>/token`; use as `GOOGLE_TOKEN_URL` and as the assertion's `aud`.
    public var tokenURL: String { baseURL + TokenEndpoint.path }

    init(core: EmulatorCore, baseURL: String, port: Int, caCertificatePEM: String?, caFilePath: String?) {
        self.core = core
        self.baseURL = baseURL
        self.port = port
        self.caCertificatePEM = caCertificatePEM
        self.caFilePath = caFilePath
    }

    // MARK: Accounts and tokens

    /// Allows the account to mint access tokens and send for its project. Registering the same email again
    /// replaces its key (a rotation) and adds the project.
    public func registerServiceAccount(_ account: RegisteredAccount) {
        core.registry.register(account)
    }

    public func registerServiceAccount(
        clientEmail: String,
        publicKey: _RSA.Signing.PublicKey,
        projectID: String,
        keyID: String? = nil
    ) {
        registerServiceAccount(RegisteredAccount(clientEmail: clientEmail, projectID: projectID, publicKey: publicKey, keyID: keyID))
    }

    public func registerServiceAccount(
        clientEmail: String,
        publicKeyPEM: String,
        projectID: String,
        keyID: String? = nil
    ) throws(RegisteredAccountError) {
        registerServiceAccount(
            try RegisteredAccount(clientEmail: clientEmail, projectID: projectID, publicKeyPEM: publicKeyPEM, keyID: keyID))
    }

    /// Every access token issued so far becomes invalid: the next send with one answers 401 UNAUTHENTICATED.
    public func revokeAccessTokens() {
        core.registry.revokeAccessTokens()
    }

    /// The next `count` token requests fail with `status` (e.g. 503, 500, 429) before any checks.
    public func failNextTokenRequests(count: Int, status: Int = 503) {
        core.tokenFaults.failNext(count: count, status: HTTPResponse.Status(code: status))
    }

    /// HTTP/2 connections opened from now on get GOAWAY after `streams` streams; nil: never.
    public func goAway(afterStreams streams: Int?) {
        core.http2Policy.streamsPerConnection = streams
    }

    /// HTTP/2 connections opened from now on advertise SETTINGS_MAX_CONCURRENT_STREAMS `streams`
    /// (1 or more) and refuse streams beyond it with RST_STREAM REFUSED_STREAM.
    public func setMaxConcurrentStreams(_ streams: Int) {
        core.http2Policy.maxConcurrentStreams = streams
    }

    // MARK: Latency and outages

    /// Sends delivered from now on are answered after a delay drawn from `profile`; nil answers them
    /// at once. A scripted `slow` outcome's delay wins; failures and dry runs never wait.
    public func setLatency(_ profile: LatencyProfile?) {
        core.latency.set(profile)
    }

    /// The emulator becomes unreachable for `duration`, as when the network path to FCM is lost:
    /// every open connection is reset at once (no GOAWAY, no answers to requests in flight), and
    /// until the outage ends every new connection is reset as soon as it is accepted, before TLS.
    /// Sends already admitted are still delivered, their answers lost (`outageDroppedStreams`).
    /// A new outage during one sets its end anew; a duration of zero only cuts the open connections.
    public func beginOutage(for duration: Duration) {
        core.outage.begin(for: duration)
    }

    /// Ends an outage now: new connections are served again.
    public func endOutage() {
        core.outage.end()
    }

    // MARK: Scripting sends

    /// Sends to `token` (`message.token` or `message.fid`) answer with `outcome` from now on; transient outcomes
    /// count their failures afresh.
    public func script(token: String, _ outcome: Outcome) {
        core.ledger.script(token: token, outcome: outcome)
    }

    /// Every token starting with `tokenPrefix` answers with `outcome`, unless scripted individually. The newest
    /// rule wins over older overlapping ones.
    public func script(tokenPrefix: String, _ outcome: Outcome) {
        core.ledger.addPrefixRule(PrefixRule(prefix: tokenPrefix, outcome: outcome))
    }

    // MARK: Inspection

    public var stats: EmulatorStats { core.ledger.stats() }

    public func stats(for token: String) -> DeviceStats {
        core.ledger.deviceStats(for: token)
    }

    /// The last accepted message to `token`, if it is among the most recent `retainedMessageLimit` accepted ones.
    public func lastAcceptedMessage(for token: String) -> AcceptedMessage? {
        core.ledger.lastAcceptedMessage(for: token)
    }

    /// The most recent accepted messages, oldest first.
    public var recentAcceptedMessages: [AcceptedMessage] { core.ledger.recentAcceptedMessages() }

    /// Forgets scripts, counters, retained messages, access tokens and token-endpoint failures; registered
    /// accounts and configured prefix rules stay.
    public func reset() {
        core.reset()
    }
}
