import Foundation
import Hummingbird
import Logging
import Synchronization

/// `POST /v1/projects/{project}/messages:send`: FCM HTTP v1 `projects.messages.send` (fcm-protocol.md §2).
struct SendEndpoint: Sendable {
    private static let pathPrefix = "/v1/projects/"
    private static let pathSuffix = "/messages:send"
    /// The route, for the router.
    static let path = pathPrefix + ":project" + pathSuffix

    /// `{project}` of a request path `/v1/projects/{project}/messages:send`; nil for any other path.
    static func projectID(inPath path: String) -> Substring? {
        guard path.hasPrefix(pathPrefix), path.hasSuffix(pathSuffix) else { return nil }
        let project = path.dropFirst(pathPrefix.count).dropLast(pathSuffix.count)
        return project.isEmpty || project.contains("/") ? nil : project
    }
    /// Bodies larger than this are not read at all; the 4096-byte message limit is checked after parsing.
    static let maximumBodySize = 1 << 20

    let registry: AccountRegistry
    let ledger: DeliveryLedger
    let latency: LatencySetting
    let messageIDs: MessageIDGenerator
    /// The scripted and authentication answers, from the FCMAnswers files.
    let answers: CannedAnswers
    let logger: Logger

    /// A send admitted for delivery, answered once its delay (scripted, or drawn from the latency
    /// profile) has passed.
    struct Admitted: Sendable {
        let delay: Duration?
        fileprivate let deviceToken: String?
        fileprivate let validateOnly: Bool
        fileprivate let projectID: String
        fileprivate let body: ByteBuffer
    }

    enum Decision: Sendable {
        case answer(GoogleResponse)
        case deliver(Admitted)
    }

    /// Served over HTTP/1.1 (HTTP/2 connections use `decide` and `deliver` on their frames).
    func respond(to request: Request, projectID: String) async -> Response {
        let body = try? await request.body.collect(upTo: Self.maximumBodySize)
        switch decide(authorization: request.headers[.authorization], projectID: projectID, body: body) {
        case .answer(let answer):
            return answer.response
        case .deliver(let admitted):
            if let delay = admitted.delay { try? await Task.sleep(for: delay) }
            return deliver(admitted).response
        }
    }

    /// Everything but the delay, without waiting: the credentials, the message, the token's
    /// scripted outcome and how long to wait. `body` is nil when it was larger than `maximumBodySize`.
    func decide(authorization: String?, projectID: String, body: ByteBuffer?) -> Decision {
        switch registry.authorize(authorizationHeader: authorization, projectID: projectID) {
        case .allowed: break
        case .unauthenticated:
            ledger.recordRejected(deviceToken: nil)
            return .answer(answers.unauthenticated)
        case .insufficientScopes:
            ledger.recordRejected(deviceToken: nil)
            return .answer(answers.insufficientScopes)
        case .forbidden:
            ledger.recordRejected(deviceToken: nil)
            return .answer(Self.permissionDenied(projectID: projectID))
        }
        guard let body else {
            ledger.recordRejected(deviceToken: nil)
            return .answer(Self.invalidArgument(PayloadViolation("Message is too big", field: "message")))
        }
        let sendRequest: SendRequest
        do throws(PayloadViolation) {
            sendRequest = try MessageValidator.validate(body)
        } catch {
            ledger.recordRejected(deviceToken: nil)
            return .answer(error.isInvalidRegistrationToken ? invalidRegistration(field: error.field) : Self.invalidArgument(error))
        }
        let deviceToken = sendRequest.target.deviceToken
        var delay: Duration?
        if let deviceToken {
            switch ledger.admit(deviceToken: deviceToken, validateOnly: sendRequest.validateOnly) {
            case .fail(let failure):
                logger.debug("Scripted failure", metadata: ["token": "\(deviceToken.prefix(20))", "failure": "\(failure)"])
                return .answer(response(for: failure, to: sendRequest.target))
            case .deliver(let scripted):
                delay = scripted
            }
        }
        // Dry runs deliver nothing, and wait for nothing, as with a scripted delay.
        if delay == nil && !sendRequest.validateOnly {
            delay = latency.sample()
        }
        return .deliver(
            Admitted(
                delay: delay, deviceToken: deviceToken, validateOnly: sendRequest.validateOnly,
                projectID: projectID, body: body))
    }

    /// Accepts an admitted send: records it and answers with its message name.
    func deliver(_ admitted: Admitted) -> GoogleResponse {
        if admitted.validateOnly {
            ledger.recordValidateOnly(deviceToken: admitted.deviceToken)
            return Self.messageName("projects/\(admitted.projectID)/messages/fake_message_id")
        }
        let name = "projects/\(admitted.projectID)/messages/\(messageIDs.next())"
        ledger.recordAccepted(
            AcceptedMessage(
                deviceToken: admitted.deviceToken, projectID: admitted.projectID, name: name,
                requestBody: String(buffer: admitted.body))
        )
        return Self.messageName(name)
    }

    private static func messageName(_ name: String) -> GoogleResponse {
        // Project IDs and message IDs hold no characters JSON needs escaped.
        GoogleResponses.json(.ok, ByteBuffer(string: #"{"name":""# + name + #""}"#))
    }

    static func permissionDenied(projectID: String) -> GoogleResponse {
        GoogleResponses.rpcStatus(
            .forbidden,
            status: "PERMISSION_DENIED",
            message:
                "Permission 'cloudmessaging.messages.create' denied on resource '//cloudresourcemanager.googleapis.com/projects/\(projectID)' (or it may not exist).",
            details: [
                .errorInfo(
                    reason: "IAM_PERMISSION_DENIED", domain: "cloudresourcemanager.googleapis.com",
                    metadata: ["permission": "cloudmessaging.messages.create", "resource": "projects/\(projectID)"])
            ]
        )
    }

    static func invalidArgument(_ violation: PayloadViolation) -> GoogleResponse {
        GoogleResponses.rpcStatus(
            .badRequest,
            status: "INVALID_ARGUMENT",
            message: violation.message,
            details: [.badRequest([.init(field: violation.field, description: violation.description)])]
                + (violation.fromFCM ? [.fcmError(errorCode: "INVALID_ARGUMENT")] : [])
        )
    }

    private func invalidRegistration(field: String) -> GoogleResponse {
        field == "message.fid" ? answers.invalidRegistrationFID : answers.invalidRegistrationToken
    }

    func response(for failure: ScriptedFailure, to target: MessageTarget) -> GoogleResponse {
        switch failure {
        case .unregistered: answers.unregistered
        case .invalidToken: if case .fid = target { answers.invalidRegistrationFID } else { answers.invalidRegistrationToken }
        case .senderIDMismatch: answers.senderIDMismatch
        case .thirdPartyAuthError: answers.thirdPartyAuthError
        case .unauthenticated: answers.unauthenticated
        case .internalError: answers.internalError
        case .unavailable(let retryAfter): answers.unavailable.retryingAfter(retryAfter)
        case .quotaExceeded(let retryAfter): answers.quotaExceeded.retryingAfter(retryAfter)
        case .rateLimitExceeded(let retryAfter): answers.rateLimitExceeded.retryingAfter(retryAfter)
        case .bare(let status):
            GoogleResponse(status: .init(code: status), headers: [.contentType: "application/json"], body: ByteBuffer(string: "{}"))
        }
    }
}

/// Unique message IDs in FCM's `0:<timestamp>%<hex>` shape, without a lock.
final class MessageIDGenerator: Sendable {
    private let counter = Atomic<UInt64>(0)
    private let epoch: String

    init() {
        // Microseconds at start keep IDs unique across emulator restarts, as a test suite may run several.
        epoch = String(UInt64(Date().timeIntervalSince1970 * 1_000_000))
    }

    func next() -> String {
        let sequence = counter.wrappingAdd(1, ordering: .relaxed).newValue
        return "0:\(epoch)%\(String(sequence, radix: 16))"
    }
}
