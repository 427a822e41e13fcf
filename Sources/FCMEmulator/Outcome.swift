/// What the emulator answers to a send addressed to a device token.
public enum Outcome: Sendable, Equatable {
    /// 200 with a message name (the default).
    case success
    /// 404 NOT_FOUND, errorCode UNREGISTERED.
    case unregistered
    /// 400 INVALID_ARGUMENT about the registration token (fieldViolation on `message.token`).
    case invalidToken
    /// 403 PERMISSION_DENIED, errorCode SENDER_ID_MISMATCH.
    case senderIDMismatch
    /// 401 UNAUTHENTICATED, errorCode THIRD_PARTY_AUTH_ERROR.
    case thirdPartyAuthError
    /// 503 UNAVAILABLE for the first `times` attempts, then success; `Retry-After` when given.
    case unavailable(times: Int, retryAfter: Int?)
    /// 500 INTERNAL for the first `times` attempts, then success.
    case internalError(times: Int)
    /// 429 RESOURCE_EXHAUSTED with the FcmError QUOTA_EXCEEDED (a message, device or topic
    /// message rate, as FCM's ErrorCode reference documents it) for the first `times` attempts,
    /// then success.
    case quotaExceeded(times: Int, retryAfter: Int?)
    /// 429 RESOURCE_EXHAUSTED with an ErrorInfo RATE_LIMIT_EXCEEDED and no FcmError (the project's
    /// per-minute send quota spent, as FCM answers it in production) for the first `times`
    /// attempts, then success.
    case rateLimitExceeded(times: Int, retryAfter: Int?)
    /// Success, answered after `delay`.
    case slow(Duration)
    /// 401 UNAUTHENTICATED without an FcmError for the first `times` attempts, then success: the
    /// access token was revoked while this send was on its way, the others of its batch untouched.
    case unauthenticated(times: Int)
    /// `status` (400 to 599) with the body `{}` and no error details, as a proxy or a front end
    /// answers: no FcmError says what it is about, so a sender goes by the status alone.
    case bareError(status: Int)
}

/// Scripts every token that starts with `prefix`, so load generators and shell users can choose outcomes by
/// naming tokens rather than through the API.
public struct PrefixRule: Sendable, Equatable {
    public var prefix: String
    public var outcome: Outcome

    public init(prefix: String, outcome: Outcome) {
        self.prefix = prefix
        self.outcome = outcome
    }
}

extension PrefixRule {
    /// The rules the `fcm-emulator` executable installs by default.
    public static let standard: [PrefixRule] = [
        PrefixRule(prefix: "unregistered-", outcome: .unregistered),
        PrefixRule(prefix: "invalid-", outcome: .invalidToken),
        PrefixRule(prefix: "mismatch-", outcome: .senderIDMismatch),
        PrefixRule(prefix: "unavailable-", outcome: .unavailable(times: 1, retryAfter: 1)),
        PrefixRule(prefix: "slow-", outcome: .slow(.milliseconds(500))),
    ]
}

extension Outcome {
    /// Parses the names the admin API and the command line use: `success`, `unregistered`, `invalid_token`,
    /// `sender_id_mismatch`, `third_party_auth_error`, `unavailable`, `internal`, `quota_exceeded`,
    /// `rate_limit_exceeded`, `slow`, `unauthenticated`, and `bare_<status>` (e.g. `bare_400`).
    /// `times` defaults to 1, `delay` to 500 ms.
    public init?(name: String, times: Int? = nil, retryAfter: Int? = nil, delay: Duration? = nil) {
        let times = times ?? 1
        switch name {
        case "success": self = .success
        case "unregistered": self = .unregistered
        case "invalid_token": self = .invalidToken
        case "sender_id_mismatch": self = .senderIDMismatch
        case "third_party_auth_error": self = .thirdPartyAuthError
        case "unavailable": self = .unavailable(times: times, retryAfter: retryAfter)
        case "internal": self = .internalError(times: times)
        case "quota_exceeded": self = .quotaExceeded(times: times, retryAfter: retryAfter)
        case "rate_limit_exceeded": self = .rateLimitExceeded(times: times, retryAfter: retryAfter)
        case "slow": self = .slow(delay ?? .milliseconds(500))
        case "unauthenticated": self = .unauthenticated(times: times)
        default:
            guard name.hasPrefix("bare_"), let status = Int(name.dropFirst(5)), (400...599).contains(status) else { return nil }
            self = .bareError(status: status)
        }
    }
}
