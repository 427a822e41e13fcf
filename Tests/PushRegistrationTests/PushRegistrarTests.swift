import DeviceRegistry
import Foundation
import Logging
import PostgresNIO
import PushRegistration
import Synchronization
import TestSupport
import Testing

/// The library as an app uses it, against push-api as deployed and PostgreSQL: each user story's
/// flow, asserted on the push_devices rows it leaves.
@Suite("PushRegistrar against push-api")
struct PushRegistrarTests {
    static let tokenA = "fcm-registration-token-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-0001"
    static let tokenB = "fcm-registration-token-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-0002"
    static let tokenC = "fcm-registration-token-cccccccccccccccccccccccccccccccccccc-0003"

    /// One install of the app: a store of its own (a folder that a reinstall wipes) and the
    /// registrar of the current launch.
    struct Install {
        let folder: URL
        let log = CapturedLog()
        var installationID: String?

        init(installationID: String? = nil) throws {
            folder = FileManager.default.temporaryDirectory.appendingPathComponent("push-install-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            self.installationID = installationID
        }

        var store: FileRegistrationStore { FileRegistrationStore(url: folder.appendingPathComponent("push-registration.json")) }

        /// A launch: a new registrar on the install's store, with retries quick enough for a test.
        func launch(_ api: RestartablePushAPI) throws -> PushRegistrar {
            let logger = log.logger()
            let configuration = PushRegistrar.Configuration(
                baseURL: api.baseURL, platform: .ios, installationID: installationID,
                retryPolicy: RetryPolicy(initialDelay: .milliseconds(100), maximumDelay: .milliseconds(500)),
                log: RegistrationLog { level, message in
                    switch level {
                    case .debug: logger.debug("\(message)")
                    case .info: logger.info("\(message)")
                    case .warning: logger.warning("\(message)")
                    case .error: logger.error("\(message)")
                    }
                })
            return try PushRegistrar(configuration: configuration, store: store)
        }

        func remove() { try? FileManager.default.removeItem(at: folder) }
    }

    /// Runs `body` while `registrar.run()` runs, as the app does while it is alive; returning
    /// (or throwing) ends the launch.
    static func whileRunning<T: Sendable>(_ registrar: PushRegistrar, _ body: () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await registrar.run() }
            defer { group.cancelAll() }
            return try await body()
        }
    }

    /// Runs `body` with push-api (started unless told), and stops push-api after it, whatever
    /// `body` did.
    static func serving(
        _ api: RestartablePushAPI, started: Bool = true, _ body: (RestartablePushAPI) async throws -> Void
    ) async throws {
        do {
            if started { try await api.start() }
            try await body(api)
        } catch {
            await api.stop()
            throw error
        }
        await api.stop()
    }

    /// Waits for a status that `holds`; records an issue and returns the last one after `limit`.
    @discardableResult
    static func status(
        of registrar: PushRegistrar, within limit: Duration = .seconds(10), sourceLocation: SourceLocation = #_sourceLocation,
        until holds: (RegistrationStatus) -> Bool
    ) async throws -> RegistrationStatus {
        let deadline = ContinuousClock.now + limit
        var status = await registrar.status
        while !holds(status) && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
            status = await registrar.status
        }
        #expect(holds(status), "status after \(limit): \(status)", sourceLocation: sourceLocation)
        return status
    }

    /// Waits until a line holding `text` is logged.
    static func logged(_ text: String, in log: CapturedLog, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        let deadline = ContinuousClock.now + .seconds(10)
        while !log.text.contains(text) && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        #expect(log.text.contains(text), "not logged within 10 s: \(text)", sourceLocation: sourceLocation)
    }

    /// Signs `user` in, hands over `token` as Firebase does, and waits until the device is
    /// registered.
    static func register(
        _ registrar: PushRegistrar, in api: RestartablePushAPI, user: Int64, token: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) async throws {
        await registrar.signedIn(account: "\(user)", accessToken: api.accessTokens(user: user))
        await registrar.fcmTokenReceived(token)
        try await status(of: registrar, sourceLocation: sourceLocation, until: registered)
    }

    static func registered(_ status: RegistrationStatus) -> Bool {
        if case .registered = status.phase { return status.pendingDeactivations == 0 }
        return false
    }

    static func retrying(_ status: RegistrationStatus) -> Bool {
        if case .retrying(let failures) = status.phase { return failures >= 2 }
        return false
    }

    @Test(.timeLimit(.minutes(1)))
    func firstLoginRegistersWithinThreeSeconds() async throws {
        try await Self.serving(try await RestartablePushAPI.onTestDatabase()) { api in
            let install = try Install()
            defer { install.remove() }
            let registrar = try install.launch(api)
            try await Self.whileRunning(registrar) {
                let updates = await registrar.statusUpdates()
                let started = ContinuousClock.now
                await registrar.signedIn(account: "42", accessToken: api.accessTokens(user: 42))
                await registrar.fcmTokenReceived(Self.tokenA)
                let rows = try await api.rows(within: .seconds(3)) { $0.count == 1 && $0[0].isActive }
                #expect(ContinuousClock.now - started < .seconds(3))
                let row = try #require(rows.first)
                let installationID = await registrar.installationID
                #expect(row.userID == 42 && row.token == Self.tokenA && row.deviceID == installationID)
                // The settings screen sees it through the stream.
                var phases: [RegistrationStatus.Phase] = []
                for await status in updates {
                    phases.append(status.phase)
                    if Self.registered(status) { break }
                }
                #expect(phases.last == .registered(deviceRowID: row.id))
            }
            // The token is logged only masked.
            #expect(!install.log.text.contains(Self.tokenA))
            #expect(install.log.text.contains("fcm-re…0001"))
        }
    }

    /// Auto-login: the next launch restores the session and Firebase hands the same token again;
    /// the row is the same one, refreshed (lastUsedAt), not a second one.
    @Test(.timeLimit(.minutes(1)))
    func autoLoginRefreshesTheSameRow() async throws {
        try await Self.serving(try await RestartablePushAPI.onTestDatabase()) { api in
            let install = try Install()
            defer { install.remove() }
            let first = try install.launch(api)
            try await Self.whileRunning(first) {
                try await Self.register(first, in: api, user: 42, token: Self.tokenA)
            }
            let before = try #require(try await api.rows().first)
            try await Task.sleep(for: .milliseconds(20))
            let next = try install.launch(api)
            try await Self.whileRunning(next) {
                // Firebase's token first, then the restored session: the order the timing bug lost.
                await next.fcmTokenReceived(Self.tokenA)
                #expect(await next.status.phase == .registered(deviceRowID: before.id))
                await next.signedIn(account: "42", accessToken: api.accessTokens(user: 42))
                let rows = try await api.rows { $0.count == 1 && $0[0].lastUsedAt > before.lastUsedAt }
                #expect(rows.first?.id == before.id && rows.first?.isActive == true)
                try await Self.status(of: next, until: Self.registered)
            }
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func tokenRefreshReplacesTheRow() async throws {
        try await Self.serving(try await RestartablePushAPI.onTestDatabase()) { api in
            let install = try Install()
            defer { install.remove() }
            let registrar = try install.launch(api)
            try await Self.whileRunning(registrar) {
                try await Self.register(registrar, in: api, user: 42, token: Self.tokenA)
                await registrar.fcmTokenReceived(Self.tokenB)
                let rows = try await api.rows { $0.count == 2 && $0[1].isActive && !$0[0].isActive }
                #expect(rows.map(\.token) == [Self.tokenA, Self.tokenB])
                #expect(rows.first?.deactivationReason == "replaced")
                let status = try await Self.status(of: registrar, until: Self.registered)
                #expect(status.phase == .registered(deviceRowID: rows[1].id))
            }
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func logoutDeactivatesTheRow() async throws {
        try await Self.serving(try await RestartablePushAPI.onTestDatabase()) { api in
            let install = try Install()
            defer { install.remove() }
            let registrar = try install.launch(api)
            try await Self.whileRunning(registrar) {
                try await Self.register(registrar, in: api, user: 42, token: Self.tokenA)
                await registrar.signedOut()
                let rows = try await api.rows { $0.count == 1 && !$0[0].isActive }
                #expect(rows.first?.deactivationReason == "logout")
                try await Self.status(of: registrar) { $0 == RegistrationStatus(phase: .signedOut, pendingDeactivations: 0) }
            }
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func permissionDeniedRegistersNothingUntilAllowed() async throws {
        try await Self.serving(try await RestartablePushAPI.onTestDatabase()) { api in
            let install = try Install()
            defer { install.remove() }
            let registrar = try install.launch(api)
            try await Self.whileRunning(registrar) {
                await registrar.permissionDenied()
                await registrar.signedIn(account: "42", accessToken: api.accessTokens(user: 42))
                await registrar.fcmTokenReceived(Self.tokenA)
                try await Self.status(of: registrar) { $0.phase == .permissionDenied && $0.isSettled }
                try await Task.sleep(for: .milliseconds(500))
                #expect(try await api.rows().isEmpty)
                #expect(install.log.lines.contains { $0.hasPrefix("warning") && $0.contains("notifications are not allowed") })
                // Allowed later, in Settings.
                await registrar.permissionGranted()
                try await api.rows { $0.count == 1 && $0[0].isActive }
            }
        }
    }

    /// Two phones of one user both receive; a logout on one leaves the other; the device list
    /// shows both and deactivates the other phone, never this one.
    @Test(.timeLimit(.minutes(1)))
    func twoDevicesOfOneUser() async throws {
        try await Self.serving(try await RestartablePushAPI.onTestDatabase()) { api in
            let (phone, tablet) = (try Install(), try Install())
            defer {
                phone.remove()
                tablet.remove()
            }
            let onPhone = try phone.launch(api)
            let onTablet = try tablet.launch(api)
            try await Self.whileRunning(onPhone) {
                try await Self.whileRunning(onTablet) {
                    await onPhone.signedIn(account: "42", accessToken: api.accessTokens(user: 42))
                    await onPhone.fcmTokenReceived(Self.tokenA)
                    await onTablet.signedIn(account: "42", accessToken: api.accessTokens(user: 42))
                    await onTablet.fcmTokenReceived(Self.tokenB)
                    let rows = try await api.rows { $0.count == 2 && $0.allSatisfy(\.isActive) }
                    let (phoneID, tabletID) = (await onPhone.installationID, await onTablet.installationID)
                    #expect(Set(rows.compactMap(\.deviceID)) == [phoneID, tabletID])

                    let listed = try await onPhone.devices()
                    #expect(listed.count == 2 && listed.allSatisfy(\.isActive))
                    let own = try #require(listed.first { $0.isThisInstallation })
                    let other = try #require(listed.first { !$0.isThisInstallation })
                    #expect(own.installationID == phoneID)
                    await #expect(throws: PushRegistrationError.thisInstallation(deviceRowID: own.id)) { try await onPhone.deactivate(own) }
                    #expect(try await api.rows().allSatisfy(\.isActive))
                    try await onPhone.deactivate(other)
                    let afterward = try await api.rows()
                    #expect(afterward.first { $0.id == other.id }?.deactivationReason == "logout")
                    #expect(afterward.first { $0.id == own.id }?.isActive == true)

                    await onPhone.signedOut()
                    try await api.rows { rows in rows.allSatisfy { !$0.isActive } }
                }
            }
        }
    }

    /// A reinstall wipes the store: a new installation id and a new token. The old row stays
    /// active until FCM answers UNREGISTERED for its token (push-api's rule); with an
    /// installation id that survives the reinstall (identifierForVendor) it is replaced at once.
    @Test(.timeLimit(.minutes(1)))
    func reinstall() async throws {
        try await Self.serving(try await RestartablePushAPI.onTestDatabase()) { api in
            for vendorID in [nil, "vendor-id-kept-across-reinstalls"] {
                let user: Int64 = vendorID == nil ? 42 : 43
                let before = try Install(installationID: vendorID)
                let registrar = try before.launch(api)
                try await Self.whileRunning(registrar) {
                    try await Self.register(registrar, in: api, user: user, token: Self.tokenA + "-\(user)")
                }
                before.remove()
                let after = try Install(installationID: vendorID)
                defer { after.remove() }
                let reinstalled = try after.launch(api)
                try await Self.whileRunning(reinstalled) {
                    try await Self.register(reinstalled, in: api, user: user, token: Self.tokenB + "-\(user)")
                }
                let rows = try await api.rows().filter { $0.userID == user }
                #expect(rows.count == 2 && rows[1].isActive && rows[1].token == Self.tokenB + "-\(user)")
                if vendorID == nil {
                    #expect(rows[0].isActive && rows[0].deviceID != rows[1].deviceID)
                } else {
                    #expect(!rows[0].isActive && rows[0].deactivationReason == "replaced")
                }
            }
        }
    }

    /// The old account's row is deactivated (logout) before the new one's is registered, both
    /// with a sign-out first and when the app only signs the new account in.
    @Test(.timeLimit(.minutes(1)))
    func accountSwitchOnOneDevice() async throws {
        try await Self.serving(try await RestartablePushAPI.onTestDatabase()) { api in
            for announced in [true, false] {
                let install = try Install()
                defer { install.remove() }
                let (old, new): (Int64, Int64) = announced ? (42, 43) : (44, 45)
                let token = Self.tokenA + "-\(old)"
                let registrar = try install.launch(api)
                try await Self.whileRunning(registrar) {
                    try await Self.register(registrar, in: api, user: old, token: token)
                    if announced { await registrar.signedOut() }
                    await registrar.signedIn(account: "\(new)", accessToken: api.accessTokens(user: new))
                    try await Self.status(of: registrar, until: Self.registered)
                }
                let rows = try await api.rows().filter { $0.token == token }
                #expect(rows.map(\.userID) == [old, new])
                let (before, after) = (rows[0], rows[1])
                // "logout", not "account_switch": the deactivation came first.
                #expect(!before.isActive && before.deactivationReason == "logout")
                #expect(after.isActive && before.deactivatedAt.map { $0 <= after.createdAt } == true)
            }
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func offlineThenOnline() async throws {
        // Not started: nothing listens on its port until it is.
        try await Self.serving(try await RestartablePushAPI.onTestDatabase(), started: false) { api in
            let install = try Install()
            defer { install.remove() }
            let registrar = try install.launch(api)
            try await Self.whileRunning(registrar) {
                await registrar.signedIn(account: "42", accessToken: api.accessTokens(user: 42))
                await registrar.fcmTokenReceived(Self.tokenA)
                try await Self.status(of: registrar, until: Self.retrying)
                try await api.start()
                try await api.rows { $0.count == 1 && $0[0].isActive }
                try await Self.status(of: registrar, until: Self.registered)
            }
            #expect(install.log.lines.contains { $0.hasPrefix("warning") && $0.contains("registration of fcm-re…0001") })
        }
    }

    /// push-api answers 503 while its database is down (a cluster of the test's own, stopped),
    /// and the registration goes through once it is back, without the app doing anything.
    @Test(.timeLimit(.minutes(2)))
    func unavailableThenRecovered() async throws {
        let cluster = try LocalCluster.start()
        defer { cluster.stop() }
        _ = try await TestPostgres.withClient(url: cluster.url()) { client in
            try await MigrationRunner.bundled().run(on: client, logger: registrationTestLogger)
        }
        let unstarted = try await RestartablePushAPI.on(databaseURL: cluster.url())
        // The cluster commits without waiting for the WAL and stops as a crash would: the app's
        // row is made durable before it goes.
        _ = try await TestPostgres.withClient(url: cluster.url()) { client in
            try await client.query("CHECKPOINT", logger: registrationTestLogger)
        }
        try await Self.serving(unstarted) { api in
            let install = try Install()
            defer { install.remove() }
            let registrar = try install.launch(api)
            cluster.stop()
            try await Self.whileRunning(registrar) {
                await registrar.signedIn(account: "42", accessToken: api.accessTokens(user: 42))
                await registrar.fcmTokenReceived(Self.tokenA)
                try await Self.status(of: registrar, within: .seconds(30), until: Self.retrying)
                #expect(install.log.text.contains("HTTP 503 DATABASE_UNAVAILABLE"))
                try cluster.restart()
                try await api.rows(within: .seconds(30)) { $0.count == 1 && $0[0].isActive }
                try await Self.status(of: registrar, until: Self.registered)
            }
        }
    }

    /// Signed out while the registration was still waiting for the network: once it is back,
    /// nothing of the user is active, and the registration is never sent.
    @Test(.timeLimit(.minutes(1)))
    func logoutWhileARegistrationIsPending() async throws {
        try await Self.serving(try await RestartablePushAPI.onTestDatabase(), started: false) { api in
            let install = try Install()
            defer { install.remove() }
            let registrar = try install.launch(api)
            try await Self.whileRunning(registrar) {
                await registrar.signedIn(account: "42", accessToken: api.accessTokens(user: 42))
                await registrar.fcmTokenReceived(Self.tokenA)
                try await Self.status(of: registrar, until: Self.retrying)
                await registrar.signedOut()
                #expect(await registrar.status.pendingDeactivations == 1)
                try await api.start()
                try await Self.status(of: registrar) { $0 == RegistrationStatus(phase: .signedOut, pendingDeactivations: 0) }
                try await Task.sleep(for: .milliseconds(500))
                #expect(try await api.rows().isEmpty)
            }
            #expect(install.log.text.contains("account 42 had no active device on this installation"))
        }
    }

    /// The app is killed with a logout not sent yet (push-api unreachable); the next launch sends
    /// it with the access token taken at sign-out, though nobody signs in.
    @Test(.timeLimit(.minutes(1)))
    func aRestartSendsTheLogoutItOwes() async throws {
        try await Self.serving(try await RestartablePushAPI.onTestDatabase()) { api in
            let install = try Install()
            defer { install.remove() }
            let first = try install.launch(api)
            try await Self.whileRunning(first) {
                try await Self.register(first, in: api, user: 42, token: Self.tokenA)
                await api.stop()
                await first.signedOut()
                try await Self.logged("deactivation for account 42 failed", in: install.log)
            }  // killed
            try await api.start()
            #expect(try await api.rows().first?.isActive == true)
            let next = try install.launch(api)
            #expect(await next.status.pendingDeactivations == 1)
            try await Self.whileRunning(next) {
                let rows = try await api.rows { $0.count == 1 && !$0[0].isActive }
                #expect(rows.first?.deactivationReason == "logout")
                try await Self.status(of: next) { $0 == RegistrationStatus(phase: .signedOut, pendingDeactivations: 0) }
            }
        }
    }

    /// The app is killed with a registration not sent yet; the next launch sends it as soon as
    /// the session is restored.
    @Test(.timeLimit(.minutes(1)))
    func aRestartSendsThePendingRegistration() async throws {
        try await Self.serving(try await RestartablePushAPI.onTestDatabase(), started: false) { api in
            let install = try Install()
            defer { install.remove() }
            let first = try install.launch(api)
            try await Self.whileRunning(first) {
                await first.signedIn(account: "42", accessToken: api.accessTokens(user: 42))
                await first.fcmTokenReceived(Self.tokenA)
                try await Self.status(of: first, until: Self.retrying)
            }  // killed
            try await api.start()
            let next = try install.launch(api)
            #expect(await next.status.phase == .waitingForSession)
            try await Self.whileRunning(next) {
                await next.signedIn(account: "42", accessToken: api.accessTokens(user: 42))
                let rows = try await api.rows { $0.count == 1 && $0[0].isActive }
                #expect(rows.first?.token == Self.tokenA)
            }
        }
    }

    /// Logout wins: a token refresh after the logout registers nothing.
    @Test(.timeLimit(.minutes(1)))
    func aLateRefreshAfterLogoutRegistersNothing() async throws {
        try await Self.serving(try await RestartablePushAPI.onTestDatabase()) { api in
            let install = try Install()
            defer { install.remove() }
            let registrar = try install.launch(api)
            try await Self.whileRunning(registrar) {
                try await Self.register(registrar, in: api, user: 42, token: Self.tokenA)
                await registrar.signedOut()
                await registrar.fcmTokenReceived(Self.tokenB)
                try await Self.status(of: registrar) { $0 == RegistrationStatus(phase: .signedOut, pendingDeactivations: 0) }
                try await Task.sleep(for: .milliseconds(500))
                let rows = try await api.rows()
                #expect(rows.count == 1 && rows.first?.token == Self.tokenA && rows.first?.deactivationReason == "logout")
            }
        }
    }

    /// An expired access token: push-api answers 401, the app's provider is asked for a fresh
    /// one, and the registration goes through.
    @Test(.timeLimit(.minutes(1)))
    func anExpiredAccessTokenIsRefreshedOnce() async throws {
        try await Self.serving(try await RestartablePushAPI.onTestDatabase()) { api in
            let install = try Install()
            defer { install.remove() }
            let registrar = try install.launch(api)
            let (expired, valid) = (api.token(user: 42, expiresIn: -120), api.token(user: 42))
            let refreshes = Mutex(0)
            try await Self.whileRunning(registrar) {
                await registrar.signedIn(account: "42") { refresh in
                    guard refresh else { return expired }
                    refreshes.withLock { $0 += 1 }
                    return valid
                }
                await registrar.fcmTokenReceived(Self.tokenA)
                try await api.rows { $0.count == 1 && $0[0].isActive }
            }
            #expect(refreshes.withLock { $0 } == 1)
        }
    }

    /// A token push-api refuses (400): given up with push-api's reason, logged, nothing written.
    @Test(.timeLimit(.minutes(1)))
    func aRefusedRegistrationIsGivenUpWithItsReason() async throws {
        try await Self.serving(try await RestartablePushAPI.onTestDatabase()) { api in
            let install = try Install()
            defer { install.remove() }
            let registrar = try install.launch(api)
            try await Self.whileRunning(registrar) {
                await registrar.signedIn(account: "42", accessToken: api.accessTokens(user: 42))
                await registrar.fcmTokenReceived("a token with spaces")
                let status = try await Self.status(of: registrar) { $0.isSettled }
                guard case .refused(let reason) = status.phase else {
                    Issue.record("not refused: \(status)")
                    return
                }
                #expect(reason.hasPrefix("HTTP 400 VALIDATION_FAILED"))
            }
            #expect(try await api.rows().isEmpty)
            #expect(install.log.lines.contains { $0.hasPrefix("error") && $0.contains("HTTP 400 VALIDATION_FAILED") })
        }
    }
}
