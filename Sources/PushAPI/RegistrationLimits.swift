import DeviceRegistry
import ServiceSupport

/// push-api's bounds per user (per app): what one signed-in client can make the service store.
public struct RegistrationLimits: Sendable, Equatable {
    /// Active devices per user and app (MAX_ACTIVE_DEVICES_PER_USER); a registration beyond it
    /// deactivates the user's least recently registered device (`device_limit`).
    public var maximumActiveDevicesPerUser: Int
    /// Registrations per user and app a minute, all of which may come at once
    /// (REGISTRATIONS_PER_USER_PER_MINUTE); beyond it 429 with Retry-After. An app registers
    /// after login, at start and on a token refresh: a few a day per device. Ten a minute lets
    /// several of a user's devices start at once and still holds a hostile client to 14,400 a day
    /// instead of a thousand a second.
    public var registrationsPerUserPerMinute: Int

    public init(
        maximumActiveDevicesPerUser: Int = DeviceDirectory.defaultMaximumActiveDevices,
        registrationsPerUserPerMinute: Int = 10
    ) {
        self.maximumActiveDevicesPerUser = maximumActiveDevicesPerUser
        self.registrationsPerUserPerMinute = registrationsPerUserPerMinute
    }

    /// MAX_ACTIVE_DEVICES_PER_USER and REGISTRATIONS_PER_USER_PER_MINUTE, each defaulted when unset.
    init(_ settings: EnvironmentSettings) throws(ConfigurationError) {
        self.init()
        if let devices = try settings.integer("MAX_ACTIVE_DEVICES_PER_USER", in: 1...10_000) {
            maximumActiveDevicesPerUser = devices
        }
        if let rate = try settings.integer("REGISTRATIONS_PER_USER_PER_MINUTE", in: 1...60_000) {
            registrationsPerUserPerMinute = rate
        }
    }
}
