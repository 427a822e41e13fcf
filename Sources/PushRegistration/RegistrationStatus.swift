/// Where this installation's registration stands, for a settings screen.
public struct RegistrationStatus: Sendable, Equatable {
    public enum Phase: Sendable, Equatable {
        /// Nobody is signed in: nothing is registered.
        case signedOut
        /// The user refused notifications: nothing is registered; the app works on.
        case permissionDenied
        /// Signed in; Firebase has not given a token yet.
        case waitingForFCMToken
        /// Signed in at an earlier launch; waiting for the app to hand over the session again
        /// (`signedIn(account:accessToken:)` at start).
        case waitingForSession
        /// Being sent now.
        case registering
        /// The last attempts failed (no network, push-api unavailable); sending again after a wait.
        case retrying(failures: Int)
        /// push-api holds this row active for this installation.
        case registered(deviceRowID: Int64)
        /// push-api refused the registration (not a temporary failure); not sent again until the
        /// token, the account or the permission changes.
        case refused(reason: String)
    }

    public var phase: Phase
    /// Deactivations (logouts, account switches) not confirmed by push-api yet.
    public var pendingDeactivations: Int

    public init(phase: Phase, pendingDeactivations: Int) {
        self.phase = phase
        self.pendingDeactivations = pendingDeactivations
    }

    /// Nothing is being sent or waiting to be sent, for now.
    public var isSettled: Bool {
        guard pendingDeactivations == 0 else { return false }
        switch phase {
        case .signedOut, .permissionDenied, .waitingForFCMToken, .registered, .refused: return true
        case .waitingForSession, .registering, .retrying: return false
        }
    }
}
