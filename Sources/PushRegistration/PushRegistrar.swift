import Foundation

/// Gives a valid access token of the signed-in user for push-api (your login service's JWT), or
/// nil when there is none. `refresh` is true after push-api refused the last one (401): get a new
/// one rather than the cached one.
public typealias AccessTokenProvider = @Sendable (_ refresh: Bool) async -> String?

/// Registers this app install's FCM token with push-api, and deactivates it, the way the
/// registration rules want: after login and at each start with a saved session, at each token
/// refresh, never after logout, never while notifications are refused, the old account before the
/// new one on an account switch. Requests go one at a time in order, survive the app being killed
/// (the store), and are retried with backoff; nothing the app calls waits for the network.
///
/// The app calls it from its own events, and runs `run()` for as long as it lives:
///
///     let push = try PushRegistrar(configuration: .init(baseURL: url, platform: .ios), store: FileRegistrationStore.standard())
///     Task { await push.run() }                                  // or .task { await push.run() }
///     await push.signedIn(account: "\(user.id)") { refresh in await session.accessToken(refresh: refresh) }
///     await push.fcmTokenReceived(token)                          // MessagingDelegate
///     await push.signedOut()                                      // before the session is dropped
///
/// Its decisions are `RegistrationMachine`'s; this actor does the I/O they ask for.
public actor PushRegistrar {
    public enum Platform: String, Sendable {
        case ios, android, web
    }

    public struct Configuration: Sendable {
        /// push-api's address, e.g. `https://push.example.com`.
        public var baseURL: URL
        public var platform: Platform
        /// The `deviceId` sent with each registration; nil: a random one, made once and kept in
        /// the store (a reinstall makes a new one).
        public var installationID: String?
        public var retryPolicy: RetryPolicy
        /// Each request's deadline.
        public var requestTimeout: Duration
        public var log: RegistrationLog

        public init(
            baseURL: URL, platform: Platform, installationID: String? = nil, retryPolicy: RetryPolicy = .standard,
            requestTimeout: Duration = .seconds(10), log: RegistrationLog = .standard
        ) {
            self.baseURL = baseURL
            self.platform = platform
            self.installationID = installationID
            self.retryPolicy = retryPolicy
            self.requestTimeout = requestTimeout
            self.log = log
        }
    }

    private enum Work: Sendable {
        case send(RegistrationMachine.RequestID, RegistrationMachine.Request)
        case wait(RegistrationMachine.TimerID, Duration)
    }

    private var machine: RegistrationMachine
    private let endpoint: DevicesEndpoint
    private let store: any RegistrationStore
    private let log: RegistrationLog
    /// The signed-in account's provider, attached by `signedIn` in this process.
    private var accessTokens: AccessTokenProvider?
    /// Where `run()` takes the requests and waits to do; nil while it is not running.
    private var work: AsyncStream<Work>.Continuation?
    private var statusWatchers: [AsyncStream<RegistrationStatus>.Continuation] = []
    public private(set) var status: RegistrationStatus

    /// Reads the store: what the last launch left pending is sent once `run()` starts.
    public init(configuration: Configuration, store: any RegistrationStore) throws {
        var record: RegistrationRecord
        do {
            record =
                try store.read().map { try JSONDecoder().decode(RegistrationRecord.self, from: $0) }
                ?? RegistrationRecord(installationID: configuration.installationID ?? UUID().uuidString)
        } catch {
            throw PushRegistrationError.unreadableStore(reason: "\(error)")
        }
        if let installationID = configuration.installationID { record.installationID = installationID }
        machine = RegistrationMachine(record: record, retryPolicy: configuration.retryPolicy)
        endpoint = DevicesEndpoint(baseURL: configuration.baseURL, platform: configuration.platform, timeout: configuration.requestTimeout)
        self.store = store
        log = configuration.log
        status = machine.status
    }

    /// This install's `deviceId`.
    public var installationID: String { machine.record.installationID }

    /// Sends what is pending and what the app's events ask for, until cancelled. Start it at
    /// launch; events before it are kept and sent once it runs.
    public func run() async {
        guard work == nil else {
            log.write(.error, "run() is already running; this call returns at once")
            return
        }
        let (requests, continuation) = AsyncStream.makeStream(of: Work.self)
        work = continuation
        apply(.started)
        await withDiscardingTaskGroup { group in
            for await item in requests {
                group.addTask { await self.perform(item) }
            }
        }
        work = nil
        apply(.stopped)
    }

    /// After a login, and at each start with a saved session (auto sign-in), as soon as the
    /// session is there: the FCM token may come before or after. `account` is your user's id as
    /// you name it; another account than the one signed in is an account switch.
    public func signedIn(account: String, accessToken: @escaping AccessTokenProvider) async {
        if let current = machine.record.account, current != account {
            // Switching without a sign-out: the old account's deactivation needs its token, now.
            await signedOut()
        }
        accessTokens = accessToken
        apply(.signedIn(account: account))
    }

    /// Before the app forgets the session: takes an access token from the provider for the
    /// deactivation (which may be sent later, even after a restart), and from now on sends
    /// nothing for this account.
    public func signedOut() async {
        let token: String?
        if machine.record.account != nil, let provider = accessTokens { token = await provider(false) } else { token = nil }
        accessTokens = nil
        apply(.signedOut(accessToken: token))
    }

    /// From Firebase: the first token, and each refresh (`messaging(_:didReceiveRegistrationToken:)`,
    /// `onNewToken`). Kept when nobody is signed in, registered with the next sign-in.
    public func fcmTokenReceived(_ token: String) {
        apply(.fcmTokenReceived(token))
    }

    /// The user refused notifications (or turned them off in Settings): nothing is registered,
    /// and a registration made before is deactivated. A warning is logged; the app works on.
    public func permissionDenied() {
        apply(.permissionChanged(granted: false))
    }

    /// Notifications are allowed (again): registered if signed in with a token.
    public func permissionGranted() {
        apply(.permissionChanged(granted: true))
    }

    /// The current status now and at every change, for a settings screen.
    public func statusUpdates() -> AsyncStream<RegistrationStatus> {
        let (updates, continuation) = AsyncStream.makeStream(of: RegistrationStatus.self, bufferingPolicy: .bufferingNewest(1))
        continuation.yield(status)
        statusWatchers.append(continuation)
        return updates
    }

    /// The signed-in user's devices in this app, active or not, newest registration first.
    public func devices() async throws(PushRegistrationError) -> [RegisteredDevice] {
        let installationID = machine.record.installationID
        return try await withAccessToken { endpoint, token in await endpoint.devices(accessToken: token) }
            .map { RegisteredDevice($0, installationID: installationID) }
    }

    /// Deactivates one of the user's other devices (an old phone): it receives nothing until it
    /// registers again. This installation's own rows are refused (`thisInstallation`): sign out or
    /// deny notifications for those.
    public func deactivate(_ device: RegisteredDevice) async throws(PushRegistrationError) {
        guard device.installationID != machine.record.installationID else { throw .thisInstallation(deviceRowID: device.id) }
        _ = try await withAccessToken { endpoint, token in await endpoint.deactivate(row: device.id, accessToken: token) }
    }

    /// A call the app waits for, with the session's access token, once more with a fresh one
    /// after a 401.
    private func withAccessToken<Success>(
        _ call: @Sendable (DevicesEndpoint, String) async -> Answer<Success>
    ) async throws(PushRegistrationError) -> Success {
        guard let provider = accessTokens else { throw .signedOut }
        for refresh in [false, true] {
            guard let token = await provider(refresh) else { throw .signedOut }
            switch await call(endpoint, token) {
            case .success(let value): return value
            case .unauthorized: continue
            case .retry(_, let reason): throw .unavailable(reason: reason)
            case .refused(let reason): throw .refused(reason: reason)
            }
        }
        throw .refused(reason: "push-api refused the access token twice (401)")
    }

    private func apply(_ event: RegistrationMachine.Event) {
        for action in machine.handle(event) {
            switch action {
            case .save(let record):
                do {
                    try store.write(JSONEncoder().encode(record))
                } catch {
                    log.write(
                        .error, "the registration store could not be written (\(error)); what is pending is lost if the app is killed")
                }
            case .send(let id, let request):
                work?.yield(.send(id, request))
            case .wait(let timer, let delay):
                work?.yield(.wait(timer, delay))
            case .log(let level, let message):
                log.write(level, message)
            }
        }
        let current = machine.status
        guard current != status else { return }
        status = current
        statusWatchers.removeAll { watcher in
            if case .terminated = watcher.yield(current) { return true }
            return false
        }
    }

    private func perform(_ work: Work) async {
        switch work {
        case .wait(let timer, let delay):
            do {
                try await Task.sleep(for: delay)
            } catch {
                return  // run() ended
            }
            apply(.retryDue(timer))
        case .send(let id, .register(let account, let fcmToken, let installationID, let fresh)):
            let answer: Answer<Int64>
            if let token = await accessToken(for: account, captured: nil, refresh: fresh) {
                answer = await endpoint.register(fcmToken: fcmToken, installationID: installationID, accessToken: token)
            } else {
                answer = .unauthorized
            }
            guard !Task.isCancelled else { return }
            apply(.registrationAnswered(id, answer, jitter: Double.random(in: 0..<1)))
        case .send(let id, .deactivate(let deactivation, let installationID, let fresh)):
            let answer: Answer<Deactivated>
            if let token = await accessToken(for: deactivation.account, captured: deactivation.accessToken, refresh: fresh) {
                if let row = deactivation.deviceRowID {
                    answer = await endpoint.deactivate(row: row, accessToken: token)
                } else {
                    answer = await endpoint.deactivate(installationID: installationID, accessToken: token)
                }
            } else {
                answer = .unauthorized
            }
            guard !Task.isCancelled else { return }
            apply(.deactivationAnswered(id, answer, jitter: Double.random(in: 0..<1)))
        }
    }

    /// The token taken at sign-out, or the provider's while the account is signed in here.
    private func accessToken(for account: String, captured: String?, refresh: Bool) async -> String? {
        if let captured, !refresh { return captured }
        guard account == machine.record.account, let provider = accessTokens else { return nil }
        return await provider(refresh)
    }
}
