import DeviceRegistry
import Foundation
import Hummingbird
import WireFormats

/// One user's devices in an app, active or not: why and since when a device stopped receiving,
/// and each device's last deliveries. Devices from `DeviceDirectory` (newest registration first,
/// keyset pages by id), deliveries from `DeliveryLog` by device.
extension ConsoleController {
    struct DeviceDeliveryRow {
        let recentID: Int64
        let recentJob: Int64
        let recentStatus: String
        let recentError: String
        let recentAttempts: Int
        let recentUpdatedAt: String
    }

    struct DeviceCard {
        let deviceRowID: Int64
        let devicePlatform: String
        let deviceTokenType: String
        let deviceToken: String
        let hasDeviceID: Bool
        let deviceID: String
        let isActive: Bool
        let deactivatedAt: String
        let deactivatedAgo: String?
        let reasonCode: String
        let reasonText: String
        let lastUsedAt: String
        let registeredAt: String
        let recent: [DeviceDeliveryRow]
        let hasRecent: Bool
    }

    struct DevicesView {
        let chrome: PageChrome
        let appOptions: [Option]
        let filterUser: String
        let appProblem: String?
        let userProblem: String?
        let hasLookup: Bool
        let lookupApp: String
        let lookupUser: Int64
        let devices: [DeviceCard]
        let hasDevices: Bool
        let hasOlder: Bool
        let olderLink: String
        let deliveriesLink: String
    }

    static let devicesPageSize = 20
    static let deliveriesPerDevice = 5

    /// What each deactivation reason means for the admin reading it.
    static func explanation(_ reason: DeactivationReason?) -> String {
        switch reason {
        case .accountSwitch?: "another user signed in on this device, or registered its token"
        case .replaced?: "the same user registered a newer token on the same device (a token refresh)"
        case .deviceLimit?: "the user went over the app's maximum of active devices; the least recently registered went"
        case .logout?: "the user's app signed out (DELETE /push/devices/{id})"
        case .stale?: "not seen for the idle days pushctl prune was given"
        case .unregistered?: "FCM answered UNREGISTERED: the app was uninstalled or the token expired"
        case .invalidToken?: "FCM answered INVALID_ARGUMENT about the token: it is not a valid token"
        case .senderIDMismatch?: "FCM answered SENDER_ID_MISMATCH: the token belongs to another Firebase project"
        case nil: "no reason was recorded"
        }
    }

    @Sendable func devices(_ request: Request, context: APIRequestContext) async throws -> Response {
        let session = try await signedIn(request)
        let query = try QueryParameters(request, allowed: ["app", "user", "before"], empty: .meansAny)
        let (appCode, userText) = (query.string("app"), query.string("user"))
        let before = try query.positiveInteger("before")
        let directory = AppDirectory(client: audit.client, logger: context.logger)
        let known = try await deadline.run { try await directory.list() }
        let chrome = PageChrome(title: "Devices", csrf: sessions.csrfToken(for: session), section: .devices)
        let appOptions = known.map { Option(value: $0.code, label: $0.code, selected: $0.code == appCode) }

        // Nothing asked yet: the form alone. Half a question: the form, with what is missing next to its field.
        let user = userText.flatMap { Int64(plainDecimal: $0) }.flatMap { $0 > 0 ? $0 : nil }
        let app = appCode.flatMap { code in known.first { $0.code == code } }
        guard let app, let user else {
            let asked = appCode != nil || userText != nil
            let appProblem = !asked || app != nil ? nil : appCode == nil ? "Choose an app." : "There is no app \(appCode ?? "")."
            let userProblem = !asked || user != nil ? nil : userText == nil ? "Give a user id." : "A user id is a positive integer."
            return pages.page(
                "devices",
                DevicesView(
                    chrome: chrome, appOptions: appOptions, filterUser: userText ?? "",
                    appProblem: appProblem, userProblem: userProblem, hasLookup: false, lookupApp: "",
                    lookupUser: 0, devices: [], hasDevices: false, hasOlder: false, olderLink: "", deliveriesLink: ""),
                status: asked ? .badRequest : .ok)
        }

        let (registry, log, logger) = (
            DeviceDirectory(client: audit.client), DeliveryLog(client: audit.client, logger: context.logger), context.logger
        )
        let (page, recent) = try await deadline.run { () -> (DeviceDirectory.Page, [Int64: [DeliveryRecord]]) in
            let page = try await registry.page(appID: app.id, userID: user, below: before, limit: Self.devicesPageSize, logger: logger)
            return (page, try await log.newest(ofDevices: page.devices.map(\.id), each: Self.deliveriesPerDevice))
        }
        let now = Date()
        let cards = page.devices.map { device in
            let deliveries = recent[device.id] ?? []
            return DeviceCard(
                deviceRowID: device.id, devicePlatform: device.platform.rawValue, deviceTokenType: device.tokenType.rawValue,
                deviceToken: maskedToken(device.token), hasDeviceID: device.deviceID != nil, deviceID: device.deviceID ?? "",
                isActive: device.isActive, deactivatedAt: device.deactivatedAt.map(ConsoleText.time) ?? "an unknown time",
                deactivatedAgo: device.deactivatedAt.map { ConsoleText.age(since: $0, now: now) },
                reasonCode: device.deactivationReason?.rawValue ?? "unknown", reasonText: Self.explanation(device.deactivationReason),
                lastUsedAt: ConsoleText.time(device.lastUsedAt), registeredAt: ConsoleText.time(device.createdAt),
                recent: deliveries.map {
                    DeviceDeliveryRow(
                        recentID: $0.id, recentJob: $0.jobID, recentStatus: $0.status.rawValue,
                        recentError: [$0.errorCode, $0.errorMessage].compactMap { $0 }.joined(separator: ": "),
                        recentAttempts: $0.attempts, recentUpdatedAt: ConsoleText.time($0.updatedAt))
                },
                hasRecent: !deliveries.isEmpty)
        }
        let older =
            page.nextCursor.map {
                "/console/devices?" + ConsoleText.query([("app", app.code), ("user", String(user)), ("before", String($0))])
            } ?? ""
        return pages.page(
            "devices",
            DevicesView(
                chrome: chrome, appOptions: appOptions, filterUser: String(user), appProblem: nil, userProblem: nil,
                hasLookup: true, lookupApp: app.code, lookupUser: user, devices: cards, hasDevices: !cards.isEmpty,
                hasOlder: !older.isEmpty, olderLink: older,
                deliveriesLink: "/console/deliveries?" + ConsoleText.query([("user", String(user)), ("app", app.code)])))
    }
}
