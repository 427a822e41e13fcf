import DeviceRegistry
import Foundation
import Hummingbird
import Logging
import PostgresNIO
import PushDispatch
import WireFormats

/// Compose: notify users or send a campaign from a form. The form becomes the JSON body
/// POST /push/notifications would receive and goes down the admin API's own path (its reading,
/// `validated()`, `AdminController.queue` and its refusals), so the console accepts and refuses
/// exactly what the API does, with the API's messages. Preview shows the FCM request the worker
/// would write, from the worker's own `PreparedMessage`.
extension ConsoleController {
    func addComposeRoutes(to console: RouterGroup<APIRequestContext>) {
        console.get("compose", use: composeForm)
        console.post("compose", use: compose)
    }

    /// The form's fields, as typed (re-shown after a refusal or with a preview).
    struct ComposeForm {
        var appCode = ""
        var isCampaign = false
        var userIDs = ""
        var platforms: Set<String> = []
        var usesRawMessage = false
        var title = ""
        var body = ""
        var data = ""
        var message = ""
        var sendAt = ""
        var expiresAt = ""
        var ttlSeconds = ""
        var priority = ""
        var dryRun = false
        var idempotencyKey = ""

        init() {}

        init(_ form: FormBody) {
            appCode = form["appCode"] ?? ""
            isCampaign = form["audience"] == "campaign"
            userIDs = form["userIds"] ?? ""
            platforms = Set(form.values["platforms"] ?? [])
            usesRawMessage = form["content"] == "json"
            title = form["title"] ?? ""
            body = form["body"] ?? ""
            data = form["data"] ?? ""
            message = form["message"] ?? ""
            sendAt = form["sendAt"] ?? ""
            expiresAt = form["expiresAt"] ?? ""
            ttlSeconds = form["ttlSeconds"] ?? ""
            priority = form["priority"] ?? ""
            dryRun = form["dryRun"] != nil
            idempotencyKey = form["idempotencyKey"] ?? ""
        }

        /// The body POST /push/notifications would be sent for this form. Text that is not what
        /// a member needs (a user id that is not a number) goes in as a string, so the API's own
        /// reader refuses it with its own message. Only what the API has no field for (the message
        /// built from title, body and data, or typed as JSON) is refused here.
        func requestMembers() throws(ComposeRefusal) -> [String: JSONValue] {
            var members: [String: JSONValue] = ["appCode": .string(appCode.trimmingCharacters(in: .whitespaces))]
            if isCampaign {
                members["campaign"] = .bool(true)
            } else {
                let ids = userIDs.split(whereSeparator: { $0 == "," || $0.isWhitespace }).map(String.init)
                if !ids.isEmpty { members["userIds"] = .array(ids.map { Int64(plainDecimal: $0).map(JSONValue.integer) ?? .string($0) }) }
            }
            if !platforms.isEmpty {
                members["platforms"] = .array(Platform.allCases.map(\.rawValue).filter(platforms.contains).map(JSONValue.string))
            }
            members["message"] = try messageValue()
            for (name, text) in [("sendAt", sendAt), ("expiresAt", expiresAt), ("priority", priority)] {
                let trimmed = text.trimmingCharacters(in: .whitespaces)
                if !trimmed.isEmpty { members[name] = .string(trimmed) }
            }
            let ttl = ttlSeconds.trimmingCharacters(in: .whitespaces)
            if !ttl.isEmpty { members["ttlSeconds"] = Int64(ttl).map(JSONValue.integer) ?? .string(ttl) }
            if dryRun { members["dryRun"] = .bool(true) }
            if !idempotencyKey.isEmpty { members["idempotencyKey"] = .string(idempotencyKey) }
            return members
        }

        private func messageValue() throws(ComposeRefusal) -> JSONValue {
            if usesRawMessage {
                do {
                    return try JSONParser.parse(Data(message.utf8), refusingRepeatedMembers: true)
                } catch {
                    throw ComposeRefusal(field: .message, message: "message is not valid JSON: \(error)")
                }
            }
            var object: [String: JSONValue] = [:]
            var notification: [String: JSONValue] = [:]
            if !title.isEmpty { notification["title"] = .string(title) }
            if !body.isEmpty { notification["body"] = .string(body) }
            if !notification.isEmpty { object["notification"] = .object(notification) }
            var entries: [String: JSONValue] = [:]
            for (number, line) in data.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated()
            where !line.trimmingCharacters(in: .whitespaces).isEmpty {
                let parts = line.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                let key = parts[0].trimmingCharacters(in: .whitespaces)
                guard parts.count == 2, !key.isEmpty else {
                    throw ComposeRefusal(field: .data, message: "data line \(number + 1) must be KEY=VALUE")
                }
                entries[key] = .string(parts[1].trimmingCharacters(in: .whitespaces))
            }
            if !entries.isEmpty { object["data"] = .object(entries) }
            guard !object.isEmpty else {
                throw ComposeRefusal(field: .title, message: "give a title, a body or data (or a raw message as JSON)")
            }
            return .object(object)
        }
    }

    /// A refusal and the field it is shown next to.
    struct ComposeRefusal: Error {
        enum Field: String { case appCode, audience, userIds, platforms, title, data, message, sendAt, expiry, priority, idempotencyKey }

        let field: Field?
        let message: String

        /// Which field an API message is about: each names its member first (`userIds.2 must be
        /// …`, `expiresAt: expires_at … is in the past`) or, for a pair, says `give …`.
        init(api message: String) {
            self.message = message
            let lead = message.prefix { $0.isLetter || $0 == "_" }
            field =
                switch lead {
                case "appCode": .appCode
                case "userIds", "campaign": .userIds
                case "platforms": .platforms
                case "message": .message
                case "idempotencyKey", "idempotency": .idempotencyKey
                case "priority": .priority
                case "sendAt": .sendAt
                case "expiresAt", "ttlSeconds": .expiry
                case "give" where message.contains("userIds"): .audience
                case "give" where message.contains("expiresAt"): .expiry
                default: nil
                }
        }

        init(field: Field?, message: String) {
            self.field = field
            self.message = message
        }
    }

    struct ComposeView {
        struct PlatformChoice {
            let value: String
            let label: String
            let checked: Bool
        }

        struct FieldError {
            let text: String
        }

        struct PlatformPreview {
            let platformName: String
            let carries: String
        }

        let chrome: PageChrome
        let csrf: String
        let appOptions: [Option]
        let isCampaign: Bool
        let userIDs: String
        let platformChoices: [PlatformChoice]
        let usesRawMessage: Bool
        let title: String
        let body: String
        let data: String
        let message: String
        let sendAt: String
        let expiresAt: String
        let ttlSeconds: String
        let priorityOptions: [Option]
        let dryRun: Bool
        let idempotencyKey: String
        /// The refusal, shown once at the top and again at its field (`appCodeError` …).
        let problem: String?
        let appCodeError: FieldError?
        let audienceError: FieldError?
        let userIdsError: FieldError?
        let platformsError: FieldError?
        let titleError: FieldError?
        let dataError: FieldError?
        let messageError: FieldError?
        let sendAtError: FieldError?
        let expiryError: FieldError?
        let priorityError: FieldError?
        let idempotencyKeyError: FieldError?
        let hasPreview: Bool
        let previewEndpoint: String
        let previewBody: String
        let previewPlatforms: [PlatformPreview]
    }

    struct ComposePreview {
        let endpoint: String
        let body: String
        let platforms: [ComposeView.PlatformPreview]
    }

    @Sendable func composeForm(_ request: Request, context: APIRequestContext) async throws -> Response {
        let session = try await signedIn(request)
        let query = try QueryParameters(request, allowed: ["app"], empty: .meansAny)
        var form = ComposeForm()
        form.appCode = query.string("app") ?? ""
        let apps = try await deadline.run { try await AppDirectory(client: client, logger: context.logger).list() }
        return composePage(form, session: session, apps: apps)
    }

    @Sendable func compose(_ request: Request, context: APIRequestContext) async throws -> Response {
        let (session, fields) = try await signedInForm(request)
        let form = ComposeForm(fields)
        let apps = try await deadline.run { try await AppDirectory(client: client, logger: context.logger).list() }
        let admin = AdminController(jobs: { JobDirectory(client: client, logger: $0) }, audit: .primary(client), deadline: deadline)
        do {
            let notification: AdminController.NotificationRequest
            do {
                notification = try AdminController.NotificationRequest(JSONObject(members: try form.requestMembers()))
            } catch let error as APIError {
                throw ComposeRefusal(api: error.message)
            }
            if fields["action"] == "send" {
                let id: Int64
                do {
                    id = try await admin.queue(notification, logger: context.logger).id
                } catch let error as APIError where error.code == APIError.validation("").code {
                    throw ComposeRefusal(api: error.message)
                }
                context.logger.info("job composed", metadata: ["push.job_id": "\(id)", "push.by": "console"])
                return .redirect(to: "/console/jobs/\(id)")
            }
            let checked: AdminController.NotificationRequest.Validated
            do {
                checked = try notification.validated()
            } catch let error as APIError {
                throw ComposeRefusal(api: error.message)
            }
            let preview = try await preview(
                notification, checked, app: apps.first { $0.code == notification.appCode }, logger: context.logger)
            return composePage(form, session: session, apps: apps, preview: preview)
        } catch let refusal as ComposeRefusal {
            return composePage(form, session: session, apps: apps, refusal: refusal, status: .badRequest)
        }
    }

    /// The FCM request for one device, as the worker writes it from the job's message as
    /// PostgreSQL stores it (`jsonb` text: what the worker reads back), at the first send.
    func preview(
        _ notification: AdminController.NotificationRequest, _ checked: AdminController.NotificationRequest.Validated,
        app: App?, logger: Logger
    ) async throws -> ComposePreview {
        let written = String(decoding: WireJSON.encoded(notification.message), as: UTF8.self)
        // `validated()` has refused what jsonb cannot hold (a NUL) before this.
        let stored = try await deadline.run { () -> String in
            let rows = try await DatabaseStatement.run("SELECT \(written)::jsonb::text", on: client, logger: logger)
            return try rows.first?.decode(String.self) ?? written
        }
        let sendAt = checked.sendAt ?? Date()
        let expiresAt = checked.expiresAt ?? checked.ttl.map { sendAt.addingTimeInterval(TimeInterval($0.components.seconds)) }
        let body = FCMRequestPreview.body(
            messageJSON: stored, dryRun: notification.dryRun ?? false, expiresAt: expiresAt,
            target: "DEVICE-TOKEN", type: .fcm, sendAt: sendAt)
        let platforms = notification.platforms?.compactMap(Platform.init(rawValue:)) ?? Platform.allCases
        let sent = ((try? JSONParser.parse(Data(body.utf8)))?["message"]?.members ?? [:]).setMembers
        let shared = ["notification", "data", "fcm_options", "fcmOptions"].filter { sent[$0] != nil }
        return ComposePreview(
            endpoint: "POST /v1/projects/\(app?.fcmProjectID ?? "PROJECT_ID")/messages:send",
            body: Self.pretty(body),
            platforms: platforms.map { platform in
                let own = Self.overrideBlock(platform)
                let carried = shared + (sent[own] != nil ? [own] : [])
                return ComposeView.PlatformPreview(
                    platformName: platform.rawValue,
                    carries: carried.isEmpty
                        ? "nothing but the token" : carried.joined(separator: ", ") + (sent[own] == nil ? " (no \(own) block)" : ""))
            })
    }

    /// FCM's per-platform block of a message: the one a device of that platform reads.
    static func overrideBlock(_ platform: Platform) -> String {
        switch platform {
        case .android: "android"
        case .ios: "apns"
        case .web: "webpush"
        }
    }

    /// JSON indented for reading; the bytes sent are the same document, unindented.
    static func pretty(_ json: String) -> String {
        guard let value = try? JSONParser.parse(Data(json.utf8)) else { return json }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(value)).map { String(decoding: $0, as: UTF8.self) } ?? json
    }

    func composePage(
        _ form: ComposeForm, session: ConsoleSession, apps: [App], refusal: ComposeRefusal? = nil,
        preview: ComposePreview? = nil, status: HTTPResponse.Status = .ok
    ) -> Response {
        let csrf = sessions.csrfToken(for: session)
        func error(_ field: ComposeRefusal.Field) -> ComposeView.FieldError? {
            refusal?.field == field ? ComposeView.FieldError(text: refusal?.message ?? "") : nil
        }
        let view = ComposeView(
            chrome: PageChrome(title: "Compose", csrf: csrf, section: .compose), csrf: csrf,
            appOptions: apps.map { Option(value: $0.code, label: "\($0.name) (\($0.code))", selected: $0.code == form.appCode) },
            isCampaign: form.isCampaign, userIDs: form.userIDs,
            platformChoices: Platform.allCases.map {
                ComposeView.PlatformChoice(value: $0.rawValue, label: $0.rawValue, checked: form.platforms.contains($0.rawValue))
            },
            usesRawMessage: form.usesRawMessage, title: form.title, body: form.body, data: form.data, message: form.message,
            sendAt: form.sendAt, expiresAt: form.expiresAt, ttlSeconds: form.ttlSeconds,
            priorityOptions: JobPriority.allCases.map {
                Option(value: $0.rawValue, label: $0.rawValue, selected: $0.rawValue == form.priority)
            },
            dryRun: form.dryRun, idempotencyKey: form.idempotencyKey,
            problem: refusal.map { "Refused: \($0.message)" },
            appCodeError: error(.appCode), audienceError: error(.audience), userIdsError: error(.userIds),
            platformsError: error(.platforms), titleError: error(.title), dataError: error(.data), messageError: error(.message),
            sendAtError: error(.sendAt), expiryError: error(.expiry), priorityError: error(.priority),
            idempotencyKeyError: error(.idempotencyKey),
            hasPreview: preview != nil, previewEndpoint: preview?.endpoint ?? "", previewBody: preview?.body ?? "",
            previewPlatforms: preview?.platforms ?? [])
        return pages.page("compose", view, status: status)
    }
}
