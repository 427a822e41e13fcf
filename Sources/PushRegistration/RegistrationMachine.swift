/// The registration's decisions, without I/O: the app's events and push-api's answers in, the
/// requests to send, the waits, the records to save and the lines to log out. `PushRegistrar` is
/// the thin layer that does what it says.
///
/// It compares what the app wants (an account signed in, an FCM token, notifications allowed)
/// with what push-api has, and sends one request at a time, in order: deactivations first (a
/// logout, the old account of a switch), then the registration the app wants, if any. A request
/// for an account that has signed out since is never sent again, so a token refresh after a
/// logout registers nothing: the logout wins.
struct RegistrationMachine: Sendable {
    enum Event: Sendable, Equatable {
        /// `PushRegistrar.run()` started or ended: requests go out only in between.
        case started
        case stopped
        /// A login, or a start with a saved session; the app's access-token provider is attached.
        case signedIn(account: String)
        /// The access token was taken from the app's provider just before it let go of the session
        /// (nil when it had none).
        case signedOut(accessToken: String?)
        case fcmTokenReceived(String)
        case permissionChanged(granted: Bool)
        /// `jitter` (0 ..< 1) spreads the backoff after a failure.
        case registrationAnswered(RequestID, Answer<Int64>, jitter: Double)
        case deactivationAnswered(RequestID, Answer<Deactivated>, jitter: Double)
        case retryDue(TimerID)
    }

    enum Action: Sendable, Equatable {
        /// Written before anything is sent, so what was sent survives the app being killed.
        case save(RegistrationRecord)
        case send(RequestID, Request)
        case wait(TimerID, Duration)
        case log(LogLevel, String)
    }

    enum Request: Sendable, Equatable {
        /// `POST /push/devices`; `freshAccessToken` after push-api refused the last one (401).
        case register(account: String, fcmToken: String, installationID: String, freshAccessToken: Bool)
        /// `DELETE /push/devices/{id}`, after looking the row up by `installationID` when its id is
        /// not known.
        case deactivate(Deactivation, installationID: String, freshAccessToken: Bool)
    }

    struct RequestID: Hashable, Sendable { let value: Int }
    struct TimerID: Hashable, Sendable { let value: Int }

    private(set) var record: RegistrationRecord
    let retryPolicy: RetryPolicy

    /// `run()` is running: requests can be sent.
    private var running = false
    /// The app's access-token provider is attached for `record.account` in this process.
    private var sessionAttached = false
    /// `record.registration` was written by push-api in this process: each launch registers
    /// once, which keeps the row's `lastUsedAt` fresh (an idle row is pruned).
    private var confirmed = false
    private var inFlight: (id: RequestID, request: Request)?
    private var pendingTimer: TimerID?
    /// Consecutive failures, for the backoff; reset by any success.
    private var failures = 0
    /// A registration push-api refused, not sent again while the wish is the same.
    private var refused: (account: String, fcmToken: String, reason: String)?
    private var nextID = 0

    init(record: RegistrationRecord, retryPolicy: RetryPolicy) {
        self.record = record
        self.retryPolicy = retryPolicy
    }

    /// The registration the app wants now, if any.
    private var wanted: (account: String, fcmToken: String)? {
        guard let account = record.account, let token = record.fcmToken, !record.permissionDenied else { return nil }
        return (account, token)
    }

    /// A registration still has to be sent for what the app wants.
    private var registrationDue: Bool {
        guard let wanted else { return false }
        if let refused, refused.account == wanted.account, refused.fcmToken == wanted.fcmToken { return false }
        guard let registration = record.registration, confirmed else { return true }
        return registration.account != wanted.account || registration.fcmToken != wanted.fcmToken
    }

    mutating func handle(_ event: Event) -> [Action] {
        let before = record
        var actions = apply(event)
        actions += proceed()
        if record != before { actions.insert(.save(record), at: 0) }
        return actions
    }

    private mutating func apply(_ event: Event) -> [Action] {
        switch event {
        case .started:
            running = true
            inFlight = nil
            pendingTimer = nil
            return []
        case .stopped:
            running = false
            inFlight = nil
            pendingTimer = nil
            return []
        case .signedIn(let account):
            return signIn(account)
        case .signedOut(let accessToken):
            return signOut(accessToken: accessToken)
        case .fcmTokenReceived(let token):
            guard record.fcmToken != token else { return [] }
            record.fcmToken = token
            return []
        case .permissionChanged(let granted):
            guard record.permissionDenied == granted else { return [] }
            record.permissionDenied = !granted
            guard !granted else { return [] }
            return [.log(.warning, "notifications are not allowed on this device: nothing is registered")]
                + withdrawRegistration(accessToken: nil)
        case .registrationAnswered(let id, let answer, let jitter):
            guard let flight = inFlight, flight.id == id,
                case .register(let account, let token, let installationID, let fresh) = flight.request
            else { return [] }
            inFlight = nil
            return registrationAnswered(
                answer, account: account, fcmToken: token, installationID: installationID, fresh: fresh, jitter: jitter)
        case .deactivationAnswered(let id, let answer, let jitter):
            guard let flight = inFlight, flight.id == id, case .deactivate(let deactivation, let installationID, let fresh) = flight.request
            else { return [] }
            inFlight = nil
            return deactivationAnswered(answer, deactivation, installationID: installationID, fresh: fresh, jitter: jitter)
        case .retryDue(let timer):
            guard pendingTimer == timer else { return [] }
            pendingTimer = nil
            return []
        }
    }

    private mutating func signIn(_ account: String) -> [Action] {
        // The same account again, already attached: nothing new to send.
        if record.account == account && sessionAttached { return [] }
        var actions: [Action] = []
        if let previous = record.account, previous != account {
            // Without a sign-out first: the previous account's provider is gone, so no access
            // token for its deactivation.
            actions += signOut(accessToken: nil)
        }
        record.account = account
        sessionAttached = true
        confirmed = false
        refused = nil
        return actions
    }

    private mutating func signOut(accessToken: String?) -> [Action] {
        guard record.account != nil else { return [] }
        let actions = withdrawRegistration(accessToken: accessToken)
        record.account = nil
        sessionAttached = false
        confirmed = false
        refused = nil
        return actions + settleOrphans()
    }

    /// The signed-in account's registration is no longer wanted (sign-out, permission refused):
    /// owe push-api its deactivation.
    private mutating func withdrawRegistration(accessToken: String?) -> [Action] {
        guard let account = record.account else { return [] }
        if let registration = record.registration, registration.account == account {
            owe(Deactivation(account: account, deviceRowID: registration.deviceRowID, accessToken: accessToken))
            record.registration = nil
        } else if record.unansweredRegistration == account || isRegistering(account) {
            owe(Deactivation(account: account, deviceRowID: nil, accessToken: accessToken))
        } else if let index = record.deactivations.firstIndex(where: { $0.account == account }), let accessToken {
            // Owed already (the permission was refused): the sign-out brings the token it needs.
            record.deactivations[index].accessToken = accessToken
        }
        if record.unansweredRegistration == account { record.unansweredRegistration = nil }
        return []
    }

    private func isRegistering(_ account: String) -> Bool {
        if case .register(account, _, _, _) = inFlight?.request { return true }
        return false
    }

    /// Adds a deactivation, or completes the one owed for the same account: one DELETE covers
    /// every row of the account with this installation's `deviceId`.
    private mutating func owe(_ deactivation: Deactivation) {
        guard let index = record.deactivations.firstIndex(where: { $0.account == deactivation.account }) else {
            record.deactivations.append(deactivation)
            return
        }
        if let row = deactivation.deviceRowID { record.deactivations[index].deviceRowID = row }
        if let token = deactivation.accessToken { record.deactivations[index].accessToken = token }
    }

    /// Deactivations that can never be sent: an account no longer signed in whose access token
    /// the app did not give. Dropped, saying so.
    private mutating func settleOrphans() -> [Action] {
        var actions: [Action] = []
        record.deactivations.removeAll { deactivation in
            guard deactivation.accessToken == nil, deactivation.account != record.account else { return false }
            actions.append(
                .log(
                    .warning,
                    "cannot deactivate the registration of account \(deactivation.account): the app gave no access token at sign-out; "
                        + "a registration of the same FCM token by another account deactivates it"))
            return true
        }
        return actions
    }

    private mutating func registrationAnswered(
        _ answer: Answer<Int64>, account: String, fcmToken: String, installationID: String, fresh: Bool, jitter: Double
    ) -> [Action] {
        switch answer {
        case .success(let rowID):
            failures = 0
            if record.unansweredRegistration == account { record.unansweredRegistration = nil }
            let registration = ServerRegistration(account: account, fcmToken: fcmToken, deviceRowID: rowID)
            guard account == record.account else {
                // Signed out (or switched) while it was on its way: the row it made is owed a
                // deactivation, which the sign-out's access token pays for.
                owe(Deactivation(account: account, deviceRowID: rowID, accessToken: nil))
                return [.log(.info, "registered \(masked(fcmToken)) as device \(rowID) after its account signed out; deactivating it")]
                    + settleOrphans()
            }
            record.registration = registration
            confirmed = true
            // Signed out and in again while it was on its way: the sign-out's deactivation
            // (sent first) can name the row.
            if let index = record.deactivations.firstIndex(where: { $0.account == account && $0.deviceRowID == nil }) {
                record.deactivations[index].deviceRowID = rowID
            }
            if record.permissionDenied { return withdrawRegistration(accessToken: nil) }
            return [.log(.info, "registered \(masked(fcmToken)) as device \(rowID)")]
        case .retry(let retryAfter, let reason):
            guard account == record.account else { return [] }  // signed out meanwhile: never sent again
            return backOff(retryAfter: retryAfter, jitter: jitter, what: "registration of \(masked(fcmToken))", reason: reason)
        case .unauthorized where !fresh && account == record.account:
            return send(.register(account: account, fcmToken: fcmToken, installationID: installationID, freshAccessToken: true))
        case .unauthorized, .refused:
            failures = 0
            let reason = answer.refusal ?? "push-api refused the access token twice (401), or the app gave none"
            guard account == record.account else { return [] }
            refused = (account, fcmToken, reason)
            return [.log(.error, "registration of \(masked(fcmToken)) refused, not retried: \(reason)")]
        }
    }

    private mutating func deactivationAnswered(
        _ answer: Answer<Deactivated>, _ deactivation: Deactivation, installationID: String, fresh: Bool, jitter: Double
    ) -> [Action] {
        switch answer {
        case .success(let done):
            failures = 0
            dropDeactivation(of: deactivation.account)
            // Every row of the account on this installation is inactive now, the one a sign-in
            // since then registered too: it is registered again after this.
            if record.registration?.account == deactivation.account { record.registration = nil }
            switch done {
            case .device(let row): return [.log(.info, "deactivated device \(row) of account \(deactivation.account)")]
            case .nothingActive: return [.log(.info, "account \(deactivation.account) had no active device on this installation")]
            }
        case .retry(let retryAfter, let reason):
            return backOff(retryAfter: retryAfter, jitter: jitter, what: "deactivation for account \(deactivation.account)", reason: reason)
        case .unauthorized where !fresh:
            return send(.deactivate(deactivation, installationID: installationID, freshAccessToken: true))
        case .unauthorized, .refused:
            failures = 0
            dropDeactivation(of: deactivation.account)
            let reason = answer.refusal ?? "push-api refused the access token (401) and no fresh one was given"
            return [.log(.error, "deactivation for account \(deactivation.account) given up: \(reason)")]
        }
    }

    private mutating func dropDeactivation(of account: String) {
        if let index = record.deactivations.firstIndex(where: { $0.account == account }) { record.deactivations.remove(at: index) }
    }

    private mutating func backOff(retryAfter: Duration?, jitter: Double, what: String, reason: String) -> [Action] {
        failures += 1
        let delay = retryPolicy.delay(afterFailures: failures, retryAfter: retryAfter, jitter: jitter)
        nextID += 1
        let timer = TimerID(value: nextID)
        pendingTimer = timer
        return [.log(.warning, "\(what) failed (\(reason)); attempt \(failures + 1) in \(delay)"), .wait(timer, delay)]
    }

    /// Sends what comes next, if anything can go now.
    private mutating func proceed() -> [Action] {
        guard running, inFlight == nil, pendingTimer == nil else { return [] }
        if let deactivation = record.deactivations.first {
            // One for the signed-in account (permission refused) uses its provider: wait for it.
            guard deactivation.accessToken != nil || sessionAttached else { return [] }
            return send(.deactivate(deactivation, installationID: record.installationID, freshAccessToken: false))
        }
        guard registrationDue, sessionAttached, let wanted else { return [] }
        return send(
            .register(account: wanted.account, fcmToken: wanted.fcmToken, installationID: record.installationID, freshAccessToken: false))
    }

    private mutating func send(_ request: Request) -> [Action] {
        nextID += 1
        let id = RequestID(value: nextID)
        if case .register(let account, _, _, _) = request { record.unansweredRegistration = account }
        inFlight = (id, request)
        return [.send(id, request)]
    }

    var status: RegistrationStatus {
        RegistrationStatus(phase: phase, pendingDeactivations: record.deactivations.count)
    }

    private var phase: RegistrationStatus.Phase {
        guard let account = record.account else { return .signedOut }
        if record.permissionDenied { return .permissionDenied }
        guard let token = record.fcmToken else { return .waitingForFCMToken }
        if let refused, refused.account == account, refused.fcmToken == token { return .refused(reason: refused.reason) }
        if registrationDue && failures > 0 { return .retrying(failures: failures) }
        if registrationDue && sessionAttached { return .registering }
        // Not due: push-api has it. Due without a session: it had it at the last launch.
        if let registration = record.registration, registration.account == account, registration.fcmToken == token {
            return .registered(deviceRowID: registration.deviceRowID)
        }
        return .waitingForSession
    }
}

/// push-api's answer to one request, as the machine needs it.
enum Answer<Success: Sendable & Equatable>: Sendable, Equatable {
    case success(Success)
    /// No connection, a timeout, 5xx or 429: try again later, after `retryAfter` when push-api
    /// said (`Retry-After`).
    case retry(after: Duration?, reason: String)
    /// 401, or no access token to send.
    case unauthorized
    /// Any other refusal (400, 403, …): a bug or a configuration error, not retried.
    case refused(reason: String)

    var refusal: String? {
        if case .refused(let reason) = self { return reason }
        return nil
    }
}

/// What a deactivation did.
enum Deactivated: Sendable, Equatable {
    case device(Int64)
    /// The account had no row with this installation's `deviceId` (or the row is not its own any
    /// more): nothing to deactivate.
    case nothingActive
}
