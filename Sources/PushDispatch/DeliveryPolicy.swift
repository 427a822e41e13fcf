import DeviceRegistry
import Foundation

/// Turns a send outcome into what is written: the delivery's state, a device to deactivate, a
/// job to fail, an app to slow down.
///
/// One device never ends a job. An answer that blames the message, the credentials or the
/// project rather than the device (a refused payload, PERMISSION_DENIED, a 404 without an
/// FcmError, a 401 after a fresh token, SENDER_ID_MISMATCH to an unproven project) fails that
/// delivery only; the job fails on wholesale evidence: `wholesaleThreshold` such answers in the
/// job and not one of its sends accepted (as this worker saw). SENDER_ID_MISMATCH also needs the
/// project unproven: once any send to it succeeded, the token belongs to another project.
struct DeliveryPolicy {
    let maxAttempts: Int
    /// Job-blaming answers of a job, none of its sends accepted, after which the job fails.
    let wholesaleThreshold: Int

    private struct Project: Hashable {
        let appID: Int64
        let projectID: String
    }
    /// Projects a send has succeeded for, as seen by this worker.
    private var provenProjects: Set<Project> = []
    /// Jobs with an accepted send: their job-blaming answers are per-device from then on.
    private var acceptedJobs: Set<Int64> = []
    private var jobBlamingAnswers: [Int64: Int] = [:]
    private var warnedJobs: Set<Int64> = []

    init(maxAttempts: Int, wholesaleThreshold: Int = 10) {
        self.maxAttempts = maxAttempts
        self.wholesaleThreshold = wholesaleThreshold
    }

    struct Decision {
        var result: DeliveryQueue.Result
        var deactivate: (deviceID: Int64, reason: DeactivationReason)?
        var failJob: String?
        var pauseApp: Duration?
        /// The first success this worker saw for the app's project, not yet recorded as proven.
        var proved: (appID: Int64, projectID: String)?
        /// For the operator, once per job.
        var warning: String?
    }

    mutating func decide(_ outcome: SendOutcome, for claimed: DeliveryQueue.Claimed, job: DeliveryQueue.Job, now: Date = Date()) -> Decision
    {
        func final(_ status: DeliveryStatus, _ code: DeliveryErrorCode?, _ message: String?, messageID: String? = nil)
            -> DeliveryQueue.Result
        {
            .init(
                claimed, status: status, errorCode: code, errorMessage: message,
                messageID: messageID, attempted: true, nextAttempt: now)
        }
        switch outcome {
        case .sent(let messageID):
            var decision = Decision(result: final(.sent, nil, nil, messageID: messageID))
            accepted(job.id)
            if let project = job.account.map({ Project(appID: job.appID, projectID: $0.projectID) }),
                provenProjects.insert(project).inserted, !job.projectProven
            {
                decision.proved = (project.appID, project.projectID)
            }
            return decision
        case .sentUnreadable(let body):
            accepted(job.id)
            let warning =
                warnedJobs.insert(job.id).inserted
                ? "app \(job.appCode): FCM accepted a send with an answer that names no message (\(body)): recorded as sent without a message id"
                : nil
            return Decision(result: final(.sent, nil, nil), warning: warning)
        case .deadToken(let code, let message, let reason):
            return Decision(result: final(.failed, code, message), deactivate: (claimed.deviceID, reason))
        case .senderMismatch(let message):
            let result = final(.failed, .senderIDMismatch, message)
            if isProven(job) {
                // Sends to this project succeed: the token belongs to another one.
                return Decision(result: result, deactivate: (claimed.deviceID, .senderIDMismatch))
            }
            return blamingTheJob(
                result, job: job,
                reason: "every send fails with SENDER_ID_MISMATCH and none to this project has "
                    + "ever succeeded: the credentials are wrong, or the tokens belong to another Firebase project (once a send to this "
                    + "project succeeds, e.g. pushctl send to a device registered with it, such tokens are deactivated instead)")
        case .thirdPartyAuth(let message):
            // Only the devices of that platform fail (APNs or web push): the job goes on.
            let warning =
                warnedJobs.insert(job.id).inserted
                ? "app \(job.appCode): FCM answers THIRD_PARTY_AUTH_ERROR: the app's APNs or web-push credentials in Firebase are wrong"
                : nil
            return Decision(result: final(.failed, .thirdPartyAuthError, message), warning: warning)
        case .failed(let code, let message):
            return Decision(result: final(.failed, code, message))
        case .payloadRejected(let code, let message):
            return blamingTheJob(final(.failed, code, message), job: job, reason: "FCM refused the message: \(message)")
        case .permissionDenied(let message):
            return blamingTheJob(
                final(.failed, .permissionDenied, message), job: job,
                reason: "the service account may not send for this project (PERMISSION_DENIED): \(message)")
        case .notFound(let message):
            return blamingTheJob(
                final(.failed, .notFound, message), job: job,
                reason:
                    "FCM answered 404 without an FcmError: no such project or endpoint (check the app's fcm_project_id and FCM_BASE_URL): \(message)"
            )
        case .notFCM(let code, let message):
            return blamingTheJob(
                final(.failed, code, message), job: job,
                reason: "FCM never answers \(message) without an error of its own: check FCM_BASE_URL and any proxy in front of FCM")
        case .unauthenticated:
            return blamingTheJob(
                final(.failed, .unauthenticated, "FCM refused a freshly minted access token"), job: job,
                reason: "FCM refused a freshly minted access token (UNAUTHENTICATED)")
        case .noAnswer(let message):
            return retry(claimed, code: .noAnswer, message: message, retryAfter: nil, quota: false, now: now)
        case .transient(let code, let message, let retryAfter, let quota):
            return retry(claimed, code: code, message: message, retryAfter: retryAfter, quota: quota, now: now)
        }
    }

    private mutating func accepted(_ job: Int64) {
        if acceptedJobs.insert(job).inserted { jobBlamingAnswers[job] = nil }
    }

    /// An answer that blames the message, credentials or project: that device's failure, and the
    /// job's once the evidence is wholesale (see the type's documentation).
    private mutating func blamingTheJob(_ result: DeliveryQueue.Result, job: DeliveryQueue.Job, reason: String) -> Decision {
        guard !acceptedJobs.contains(job.id) else { return Decision(result: result) }
        let count = jobBlamingAnswers[job.id, default: 0] + 1
        jobBlamingAnswers[job.id] = count
        guard count >= wholesaleThreshold else { return Decision(result: result) }
        return Decision(result: result, failJob: "app \(job.appCode): \(reason)")
    }

    /// A transient failure that spent an attempt: retried with a backoff until attempts run out.
    private func retry(
        _ claimed: DeliveryQueue.Claimed, code: DeliveryErrorCode, message: String, retryAfter: Duration?, quota: Bool, now: Date
    ) -> Decision {
        let attempt = claimed.attempts + 1
        guard attempt < maxAttempts else {
            return Decision(
                result: .init(
                    claimed, status: .failed, errorCode: code, errorMessage: message,
                    messageID: nil, attempted: true, nextAttempt: now))
        }
        // The server's Retry-After wins, from a second (`Retry-After: 0` or a date past spent
        // every attempt in three seconds) to an hour. Without it, the backoff doubles, from a
        // minute for quota.
        let delay =
            retryAfter.map { min(max($0, Self.shortestRetryAfter), Self.longestRetryAfter) }
            ?? Self.backoff(attempt: attempt, quota: quota)
        let retry = DeliveryQueue.Result(
            claimed, status: .pending, errorCode: code,
            errorMessage: message, messageID: nil, attempted: true,
            nextAttempt: now.addingTimeInterval(delay.inSeconds))
        return Decision(result: retry, pauseApp: quota ? delay : nil)
    }

    private func isProven(_ job: DeliveryQueue.Job) -> Bool {
        guard let account = job.account else { return false }
        return job.projectProven || provenProjects.contains(Project(appID: job.appID, projectID: account.projectID))
    }

    /// 1 s, 2 s, 4 s … with ±50 % jitter, at most five minutes; quota errors wait at least a
    /// minute (60 s, 120 s … jittered upwards only).
    static func backoff(attempt: Int, quota: Bool) -> Duration {
        let base = (quota ? 60.0 : 1.0) * pow(2, Double(max(0, attempt - 1)))
        let jittered = min(max(base * Double.random(in: 0.5...1.5), quota ? 60 : 0), 300)
        return .milliseconds(Int(jittered * 1000))
    }

    static let shortestRetryAfter: Duration = .seconds(1)

    /// The server's `Retry-After` is honoured up to an hour, so that a delivery's retries stay
    /// bounded in time as well as in number.
    static let longestRetryAfter: Duration = .seconds(3600)

    mutating func forget(job: Int64) {
        acceptedJobs.remove(job)
        jobBlamingAnswers[job] = nil
        warnedJobs.remove(job)
    }
}
