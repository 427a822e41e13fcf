import Foundation

/// Turns a send outcome into what is written: the delivery's state, a device to deactivate, a
/// job to fail, an app to slow down. Holds per-job evidence (has any send succeeded?) because
/// wholesale SENDER_ID_MISMATCH or THIRD_PARTY_AUTH_ERROR means wrong credentials, not dead tokens.
struct DeliveryPolicy {
    let maxAttempts: Int
    /// Failures of these kinds, with no success yet, after which the job's credentials are blamed.
    let wholesaleThreshold: Int

    struct JobEvidence {
        var successes = 0
        var credentialFailures = 0
    }
    private var evidence: [Int64: JobEvidence] = [:]

    init(maxAttempts: Int, wholesaleThreshold: Int = 10) {
        self.maxAttempts = maxAttempts
        self.wholesaleThreshold = wholesaleThreshold
    }

    struct Decision {
        var result: DeliveryQueue.Result
        var deactivate: (deviceID: Int64, reason: String)?
        var failJob: String?
        var pauseApp: Duration?
    }

    mutating func decide(_ outcome: SendOutcome, for claimed: DeliveryQueue.Claimed, job: DeliveryQueue.Job, now: Date = Date()) -> Decision {
        func final(_ status: String, _ code: String?, _ message: String?, messageID: String? = nil) -> DeliveryQueue.Result {
            .init(claimed, status: status, errorCode: code, errorMessage: message.map { String($0.prefix(500)) },
                  messageID: messageID, attempted: true, nextAttempt: now)
        }
        switch outcome {
        case .sent(let messageID):
            evidence[job.id, default: .init()].successes += 1
            return Decision(result: final("sent", nil, nil, messageID: messageID))
        case .deadToken(let code, let message, let reason):
            return Decision(result: final("failed", code, message), deactivate: (claimed.deviceID, reason))
        case .senderMismatch(let message):
            return credentialFailure(claimed, job, code: "SENDER_ID_MISMATCH", message: message, deactivateWhenProven: "sender_id_mismatch",
                                     blame: "every send fails with SENDER_ID_MISMATCH: the tokens belong to another Firebase project, or the credentials are wrong",
                                     result: final("failed", "SENDER_ID_MISMATCH", message))
        case .thirdPartyAuth(let message):
            return credentialFailure(claimed, job, code: "THIRD_PARTY_AUTH_ERROR", message: message, deactivateWhenProven: nil,
                                     blame: "every send fails with THIRD_PARTY_AUTH_ERROR: the app's APNs or web-push credentials in Firebase are wrong",
                                     result: final("failed", "THIRD_PARTY_AUTH_ERROR", message))
        case .failed(let code, let message):
            return Decision(result: final("failed", code, message))
        case .payloadRejected(let code, let message):
            return Decision(result: final("failed", code, message), failJob: "app \(job.appCode): FCM refused the message: \(message)")
        case .permissionDenied(let message):
            return Decision(result: final("failed", "PERMISSION_DENIED", message),
                            failJob: "app \(job.appCode): the service account may not send for this project (PERMISSION_DENIED): \(message)")
        case .notFound(let message):
            return Decision(result: final("failed", "NOT_FOUND", message),
                            failJob: "app \(job.appCode): FCM answered 404 without an FcmError: no such project or endpoint (check the app's fcm_project_id and FCM_BASE_URL): \(message)")
        case .unauthenticated:
            return Decision(result: final("failed", "UNAUTHENTICATED", "FCM refused a freshly minted access token"),
                            failJob: "app \(job.appCode): FCM refused a freshly minted access token (UNAUTHENTICATED)")
        case .transient(let code, let message, let retryAfter, let quota):
            let attempt = claimed.attempts + 1
            guard attempt < maxAttempts else { return Decision(result: final("failed", code, message)) }
            // The server's Retry-After wins; without it, quota errors back off from a minute.
            let delay = retryAfter ?? Self.backoff(attempt: attempt, quota: quota)
            let retry = DeliveryQueue.Result(claimed, status: "pending", errorCode: code,
                                             errorMessage: String(message.prefix(500)), messageID: nil, attempted: true,
                                             nextAttempt: now.addingTimeInterval(Self.seconds(delay)))
            return Decision(result: retry, pauseApp: quota ? delay : nil)
        }
    }

    private mutating func credentialFailure(_ claimed: DeliveryQueue.Claimed, _ job: DeliveryQueue.Job, code: String, message: String,
                                            deactivateWhenProven reason: String?, blame: String, result: DeliveryQueue.Result) -> Decision {
        var record = evidence[job.id, default: .init()]
        defer { evidence[job.id] = record }
        if record.successes > 0 {
            // The credentials work for other tokens: this token is the problem.
            return Decision(result: result, deactivate: reason.map { (claimed.deviceID, $0) })
        }
        record.credentialFailures += 1
        if record.credentialFailures >= wholesaleThreshold {
            return Decision(result: result, failJob: "app \(job.appCode): \(blame)")
        }
        return Decision(result: result)
    }

    /// 1 s, 2 s, 4 s … with ±50 % jitter, capped at five minutes; quota errors start at a minute.
    static func backoff(attempt: Int, quota: Bool) -> Duration {
        let base = (quota ? 60.0 : 1.0) * pow(2, Double(max(0, attempt - 1)))
        let jittered = min(base, 300) * Double.random(in: 0.5...1.5)
        return .milliseconds(Int(jittered * 1000))
    }

    static func seconds(_ duration: Duration) -> TimeInterval {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    mutating func forget(job: Int64) { evidence[job] = nil }
}
