/// What this installation keeps between launches: the app's wishes (who is signed in, the FCM
/// token, the permission), what the server has, and the deactivations still owed. Written after
/// every change, so a registration or deactivation the app was killed before sending is sent by
/// the next launch.
struct RegistrationRecord: Codable, Equatable, Sendable {
    /// The `deviceId` sent with every registration: one per install of the app.
    var installationID: String
    /// The signed-in account, as the app names its user; nil when signed out.
    var account: String?
    /// The latest FCM registration token the app was given.
    var fcmToken: String?
    /// The user refused notifications: nothing is registered.
    var permissionDenied = false
    /// The row push-api has active for this installation, as far as its last answer said.
    var registration: ServerRegistration?
    /// Rows to deactivate, oldest first; sent before any registration, so a logout or an account
    /// switch reaches the server before what follows it.
    var deactivations: [Deactivation] = []
    /// The account a registration was sent for without a definite answer (no connection, a 5xx):
    /// the server may hold a row for it that this installation does not know the id of.
    var unansweredRegistration: String?

    init(installationID: String) {
        self.installationID = installationID
    }
}

/// A row push-api holds active for this installation.
struct ServerRegistration: Codable, Equatable, Sendable {
    var account: String
    var fcmToken: String
    /// The row's `id` in push-api's answer, what `DELETE /push/devices/{id}` takes.
    var deviceRowID: Int64
}

/// A deactivation still to be sent for one account.
struct Deactivation: Codable, Equatable, Sendable {
    var account: String
    /// The row to deactivate; nil when the row's id never came back, and the account's rows with
    /// this installation's `deviceId` are looked up first. Deactivating one of them deactivates
    /// the account's other active rows with that `deviceId` too (push-api's logout rule).
    var deviceRowID: Int64?
    /// The access token taken from the app when the account signed out, for a deactivation sent
    /// after the app has forgotten the session; nil while the account is still signed in (its
    /// access-token provider is asked instead).
    var accessToken: String?
}
