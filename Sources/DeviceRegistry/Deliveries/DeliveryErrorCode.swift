import PostgresNIO

/// `push_deliveries.error_code`: why a delivery is not sent (yet). An open set, like
/// `HTTPResponse.Status`: FCM's `ErrorCode`s and Google RPC statuses are recorded as FCM names
/// them, including ones newer than this program, beside the codes the worker and the SQL
/// functions write for what happens before or instead of a send. The constants are the codes
/// this project writes or acts on; docs/sending.md explains each.
public struct DeliveryErrorCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible,
    PostgresNonThrowingEncodable, PostgresArrayEncodable
{
    public let rawValue: String

    public init(rawValue: String) { self.rawValue = rawValue }

    public var description: String { rawValue }

    // FCM's ErrorCode values (an FcmError's `errorCode`).
    public static let unregistered = Self(rawValue: "UNREGISTERED")
    public static let invalidArgument = Self(rawValue: "INVALID_ARGUMENT")
    public static let senderIDMismatch = Self(rawValue: "SENDER_ID_MISMATCH")
    public static let thirdPartyAuthError = Self(rawValue: "THIRD_PARTY_AUTH_ERROR")
    public static let quotaExceeded = Self(rawValue: "QUOTA_EXCEEDED")
    public static let unavailable = Self(rawValue: "UNAVAILABLE")
    public static let `internal` = Self(rawValue: "INTERNAL")

    // Google RPC statuses FCM answers without an FcmError, for the app's credentials or project.
    public static let permissionDenied = Self(rawValue: "PERMISSION_DENIED")
    public static let notFound = Self(rawValue: "NOT_FOUND")
    public static let unauthenticated = Self(rawValue: "UNAUTHENTICATED")

    // The worker's: no FCM answer to record.
    /// Written, never answered: FCM may have delivered it.
    public static let noAnswer = Self(rawValue: "NO_ANSWER")
    /// Not written to FCM (the connection was not there, or held back while FCM fails the app's
    /// project and its one probe goes first); retried without spending an attempt.
    public static let notSent = Self(rawValue: "NOT_SENT")
    public static let fcmUnreachable = Self(rawValue: "FCM_UNREACHABLE")
    /// Google's token endpoint refused the app's service account.
    public static let oauth = Self(rawValue: "OAUTH")
    /// Google's token endpoint, or the way to it, is down: the deliveries wait.
    public static let oauthUnavailable = Self(rawValue: "OAUTH_UNAVAILABLE")
    public static let noCredentials = Self(rawValue: "NO_CREDENTIALS")
    public static let deviceInactive = Self(rawValue: "DEVICE_INACTIVE")
    /// A retry waiting while its job ends; settled by the job's end.
    public static let jobEnded = Self(rawValue: "JOB_ENDED")

    // The job's end, written by the worker and the SQL functions.
    public static let expired = Self(rawValue: "EXPIRED")
    public static let cancelled = Self(rawValue: "CANCELLED")
    public static let jobFailed = Self(rawValue: "JOB_FAILED")

    /// FCM answered an HTTP status and nothing that names the error.
    public static func httpStatus(_ status: Int) -> Self { Self(rawValue: "HTTP_\(status)") }

    /// The codes this project writes itself (not FCM's or Google's names), each documented.
    public static let written: [Self] = [
        .noAnswer, .notSent, .fcmUnreachable, .oauth, .oauthUnavailable, .noCredentials, .deviceInactive, .jobEnded,
        .expired, .cancelled, .jobFailed,
    ]

    public static var psqlType: PostgresDataType { .text }
    public static var psqlFormat: PostgresFormat { .binary }
    public static var psqlArrayType: PostgresDataType { .textArray }

    public func encode<JSONEncoder: PostgresJSONEncoder>(into byteBuffer: inout ByteBuffer, context: PostgresEncodingContext<JSONEncoder>) {
        rawValue.encode(into: &byteBuffer, context: context)
    }
}
