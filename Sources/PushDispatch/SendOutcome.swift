import DeviceRegistry
import Foundation
import NIOCore
import WireFormats

/// What one FCM answer means for the delivery, the device and the job (fcm-protocol.md §2).
public enum SendOutcome: Sendable, Equatable {
    case sent(messageID: String)
    /// A 2xx whose body holds no message name: FCM took the message (sending it again would
    /// duplicate it), but the answer is not what FCM sends; logged and counted apart.
    case sentUnreadable(body: String)
    /// Permanent, and the token is dead: deactivate the device with `reason`.
    case deadToken(errorCode: DeliveryErrorCode, message: String, reason: DeactivationReason)
    /// SENDER_ID_MISMATCH: the token belongs to another Firebase project. Deactivated once a send
    /// to the app's project has succeeded; before that, wholesale, it means wrong credentials.
    case senderMismatch(message: String)
    /// THIRD_PARTY_AUTH_ERROR: the app's APNs/web-push credentials in Firebase are wrong.
    case thirdPartyAuth(message: String)
    /// Permanent for this delivery; the token is kept.
    case failed(errorCode: DeliveryErrorCode, message: String)
    /// Our message itself is refused (400 not about the token): every device would refuse it.
    case payloadRejected(errorCode: DeliveryErrorCode, message: String)
    /// The service account may not send for this project (403 PERMISSION_DENIED).
    case permissionDenied(message: String)
    /// 404 without an FcmError: no such project or endpoint (a wrong project id or base URL),
    /// which says nothing about the token; only UNREGISTERED does.
    case notFound(message: String)
    /// A status FCM never answers (a redirect, 418, 407…) with no Google error in the body:
    /// something other than FCM answered (a proxy, a wrong base URL), which says nothing about
    /// the token.
    case notFCM(errorCode: DeliveryErrorCode, message: String)
    /// Our access token expired or was revoked (401 without an FcmError).
    case unauthenticated
    /// Worth retrying; `retryAfter` from the server when it said; `quota` slows the whole app.
    case transient(errorCode: DeliveryErrorCode, message: String, retryAfter: Duration?, quota: Bool)
    /// Written, and no answer came (the connection died, the deadline passed): FCM may have
    /// delivered it. Retried as transient, spending an attempt: the one way a send can duplicate.
    case noAnswer(message: String)

    /// Classifies an FCM answer: the `details` entry of type FcmError decides, then the status.
    static func classify(status: Int, body: ByteBuffer, retryAfter: String?) -> SendOutcome {
        let json = body.withUnsafeReadableBytes { try? JSONParser.parse($0) }
        if (200...299).contains(status) {
            let name = json?["name"]?.string ?? ""
            guard !name.isEmpty else { return .sentUnreadable(body: String(String(buffer: body).prefix(200))) }
            // `projects/<project>/messages/<id>`: the id is what the delivery log keeps.
            return .sent(messageID: name.lastIndex(of: "/").map { String(name[name.index(after: $0)...]) } ?? name)
        }
        let error = GoogleRPCError(json)
        let message = error.message ?? "HTTP \(status)"
        let retry = retryAfter.flatMap(Self.parseRetryAfter)
        switch error.fcmErrorCode {
        case .unregistered?:
            return .deadToken(errorCode: .unregistered, message: message, reason: .unregistered)
        case .invalidArgument?:
            return error.isAboutToken
                ? .deadToken(errorCode: .invalidArgument, message: message, reason: .invalidToken)
                : .payloadRejected(errorCode: .invalidArgument, message: message)
        case .senderIDMismatch?:
            return .senderMismatch(message: message)
        case .thirdPartyAuthError?, DeliveryErrorCode(rawValue: "APNS_AUTH_ERROR")?:
            // APNS_AUTH_ERROR is FCM's older name for it: gone from FCM's ErrorCode reference, still
            // mapped to ThirdPartyAuthError by the Admin SDKs.
            return .thirdPartyAuth(message: message)
        case .quotaExceeded?:
            // FCM names the rate in a QuotaFailure (and the message): one device's own rate
            // slows that device only; the project's and a topic's message rates the whole app.
            return .transient(errorCode: .quotaExceeded, message: message, retryAfter: retry, quota: !error.isDeviceRate)
        case let code? where code == .unavailable || code == .internal:
            return .transient(errorCode: code, message: message, retryAfter: retry, quota: false)
        case let code?:
            // A code this worker does not know is read by its HTTP status, as the Admin SDKs do:
            // retried when the status says so, else this device's failure.
            switch status {
            case 429: return .transient(errorCode: code, message: message, retryAfter: retry, quota: true)
            case 408, 500...599: return .transient(errorCode: code, message: message, retryAfter: retry, quota: false)
            default: return .failed(errorCode: code, message: message)
            }
        case nil:
            break
        }
        switch status {
        case 400: return .payloadRejected(errorCode: error.status ?? .invalidArgument, message: message)
        case 401: return .unauthenticated
        case 403: return .permissionDenied(message: message)
        case 404: return .notFound(message: message)
        case 429: return .transient(errorCode: .quotaExceeded, message: message, retryAfter: retry, quota: true)
        case 408, 500...599:
            return .transient(errorCode: error.status ?? .httpStatus(status), message: message, retryAfter: retry, quota: false)
        default:
            guard let code = error.status else { return .notFCM(errorCode: .httpStatus(status), message: message) }
            return .failed(errorCode: code, message: message)
        }
    }

    /// `Retry-After` in seconds (FCM's form) or as an HTTP date.
    static func parseRetryAfter(_ value: String) -> Duration? {
        if let seconds = Int(value.trimmingCharacters(in: .whitespaces)), seconds >= 0 { return .seconds(seconds) }
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss zzz"
        guard let date = formatter.date(from: value) else { return nil }
        return .seconds(max(0, date.timeIntervalSinceNow))
    }
}

/// A google.rpc.Status error body.
struct GoogleRPCError {
    var status: DeliveryErrorCode?
    var message: String?
    var fcmErrorCode: DeliveryErrorCode?
    var fieldViolations: [String] = []
    var quotaViolations: [String] = []

    init(_ body: JSONValue?) {
        guard let error = body?["error"] else { return }
        status = error["status"]?.string.map(DeliveryErrorCode.init(rawValue:))
        message = error["message"]?.string
        for detail in error["details"]?.elements ?? [] {
            switch detail["@type"]?.string {
            case "type.googleapis.com/google.firebase.fcm.v1.FcmError":
                fcmErrorCode = detail["errorCode"]?.string.map(DeliveryErrorCode.init(rawValue:))
            case "type.googleapis.com/google.rpc.QuotaFailure":
                quotaViolations += (detail["violations"]?.elements ?? []).compactMap { $0["description"]?.string }
            case "type.googleapis.com/google.rpc.BadRequest":
                fieldViolations += (detail["fieldViolations"]?.elements ?? []).compactMap { $0["field"]?.string }
            default:
                continue
            }
        }
    }

    /// QUOTA_EXCEEDED for one device's message rate ("Device message rate exceeded."), not the
    /// project's or a topic's.
    var isDeviceRate: Bool {
        (quotaViolations + [message ?? ""]).contains { $0.localizedCaseInsensitiveContains("device message rate") }
    }

    /// INVALID_ARGUMENT about the registration token rather than our payload: the fields FCM
    /// names decide when it names any; otherwise only FCM's own sentence about the token does.
    /// FCM's messages quote the sender's keys and values, so words found anywhere in one prove
    /// nothing, and deactivating on them would drop every device a campaign reached.
    var isAboutToken: Bool {
        guard fieldViolations.isEmpty else { return fieldViolations.contains { $0 == "message.token" || $0 == "message.fid" } }
        return message?.hasPrefix("The registration token is not a valid FCM registration token") ?? false
    }
}
