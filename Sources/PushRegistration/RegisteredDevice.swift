import Foundation

/// One of the signed-in user's devices, as `GET /push/devices` lists them, for a settings
/// screen's device list. Tokens are left out: the screen has no use for them.
public struct RegisteredDevice: Sendable, Equatable, Identifiable {
    /// The row's id, what deactivation takes.
    public let id: Int64
    /// `ios`, `android` or `web`.
    public let platform: String
    /// The install's `deviceId`, if it sent one.
    public let installationID: String?
    public let isActive: Bool
    public let lastUsedAt: Date
    public let createdAt: Date
    /// Why it stopped receiving: `logout`, `replaced`, `account_switch`, `unregistered`, …
    public let deactivationReason: String?
    /// This install of the app: turned off by signing out or refusing notifications, not from
    /// the list.
    public let isThisInstallation: Bool

    /// The wire form, with push-api's member names.
    struct Wire: Decodable, Sendable, Equatable {
        let id: Int64
        let platform: String
        let deviceId: String?
        let isActive: Bool
        let lastUsedAt: Date
        let createdAt: Date
        let deactivationReason: String?
    }

    init(_ wire: Wire, installationID: String) {
        id = wire.id
        platform = wire.platform
        self.installationID = wire.deviceId
        isActive = wire.isActive
        lastUsedAt = wire.lastUsedAt
        createdAt = wire.createdAt
        deactivationReason = wire.deactivationReason
        isThisInstallation = wire.deviceId == installationID
    }
}
