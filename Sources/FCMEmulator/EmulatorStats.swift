/// Counters since start (or the last reset).
public struct EmulatorStats: Sendable, Equatable, Encodable {
    /// Access tokens minted.
    public var tokenExchanges = 0
    /// Token requests answered with an error (bad assertion, scripted failure…).
    public var rejectedTokenExchanges = 0
    /// Send requests answered 200 and counted as delivered.
    public var accepted = 0
    /// Device tokens with at least one accepted send. When every send names a token, `accepted`
    /// minus this is the number of duplicate deliveries (a send accepted again after its answer was lost).
    public var distinctAcceptedTokens = 0
    /// Send requests answered with any error, including 401/403.
    public var rejected = 0
    /// Send requests with `validate_only: true` answered 200 (never delivered).
    public var validateOnly = 0
    /// Connections closed at once, before TLS, because an outage was on.
    public var outageRefusedConnections = 0
    /// Requests (HTTP/2 streams, HTTP/1.1 requests) whose connection an outage cut before they were
    /// answered. A send among them that had been admitted is still delivered and counted in `accepted`,
    /// as FCM delivers a message whose answer the lost network path dropped.
    public var outageDroppedStreams = 0
    /// Per device token (`message.token` or `message.fid`); topic and condition sends only count in the totals.
    public var devices: [String: DeviceStats] = [:]

    public init() {}

    private enum CodingKeys: String, CodingKey {
        case tokenExchanges = "token_exchanges"
        case rejectedTokenExchanges = "rejected_token_exchanges"
        case accepted
        case distinctAcceptedTokens = "distinct_accepted_tokens"
        case rejected
        case validateOnly = "validate_only"
        case outageRefusedConnections = "outage_refused_connections"
        case outageDroppedStreams = "outage_dropped_streams"
        case devices
    }
}

/// Send counters for one device token.
public struct DeviceStats: Sendable, Equatable, Encodable {
    public var accepted = 0
    public var rejected = 0
    public var validateOnly = 0

    public init(accepted: Int = 0, rejected: Int = 0, validateOnly: Int = 0) {
        self.accepted = accepted
        self.rejected = rejected
        self.validateOnly = validateOnly
    }

    private enum CodingKeys: String, CodingKey {
        case accepted
        case rejected
        case validateOnly = "validate_only"
    }
}

/// A send the emulator accepted (kept for the most recent `Configuration.retainedMessageLimit` sends).
public struct AcceptedMessage: Sendable, Equatable, Encodable {
    /// `message.token` or `message.fid`; nil for topic and condition sends.
    public var deviceToken: String?
    public var projectID: String
    /// The `name` answered, `projects/<project>/messages/<id>`.
    public var name: String
    /// The request body exactly as received (`{"message": {...}}`).
    public var requestBody: String

    private enum CodingKeys: String, CodingKey {
        case deviceToken = "token"
        case projectID = "project_id"
        case name
        case requestBody = "request_body"
    }
}
