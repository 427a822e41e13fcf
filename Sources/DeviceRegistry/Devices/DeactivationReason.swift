/// Why a device row was deactivated (`push_devices.deactivation_reason`), as registrations,
/// logouts, pruning and FCM's answers write it.
public enum DeactivationReason: String, TextColumnEnum, Encodable {
    /// Another user registered the token, or a token on the same deviceId (`push_register_device`).
    case accountSwitch = "account_switch"
    /// The same user registered a new token on the same deviceId: a token refresh.
    case replaced
    /// The user went over the app's maximum of active devices; the least recently registered go.
    case deviceLimit = "device_limit"
    /// The user's app deactivated it (DELETE /push/devices/{id}).
    case logout
    /// Not seen for the idle days `pushctl prune` was given.
    case stale
    /// FCM answered UNREGISTERED.
    case unregistered
    /// FCM answered INVALID_ARGUMENT about the token.
    case invalidToken = "invalid_token"
    /// FCM answered SENDER_ID_MISMATCH for a project sends have succeeded to before.
    case senderIDMismatch = "sender_id_mismatch"
}
