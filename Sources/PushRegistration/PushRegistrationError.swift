/// Why a call the app waits for (the device list, a device's deactivation, opening the store)
/// failed. The registration itself never throws: it retries, or logs why it gave up.
public enum PushRegistrationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Nobody is signed in, or the app's provider gave no access token.
    case signedOut
    /// push-api could not be reached, or answered that it is unavailable for now.
    case unavailable(reason: String)
    /// push-api refused the call (the access token, or what was asked).
    case refused(reason: String)
    /// The device is this installation's own: it stops receiving when the user signs out or
    /// refuses notifications, not from the device list (its row would be registered again).
    case thisInstallation(deviceRowID: Int64)
    /// The store holds something that is not a registration record; nothing was changed.
    case unreadableStore(reason: String)

    public var description: String {
        switch self {
        case .signedOut: "nobody is signed in"
        case .unavailable(let reason): "push-api is unavailable: \(reason)"
        case .refused(let reason): "push-api refused: \(reason)"
        case .thisInstallation(let row): "device \(row) is this installation: sign out or turn notifications off instead"
        case .unreadableStore(let reason): "the registration store is unreadable: \(reason)"
        }
    }
}
