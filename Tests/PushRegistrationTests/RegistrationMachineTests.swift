import Testing

@testable import PushRegistration

/// The registration's decisions without a socket or a file: the app's events and push-api's
/// answers in, requests, waits, saves and log lines out.
@Suite("Registration state machine")
struct RegistrationMachineTests {
    typealias Machine = RegistrationMachine
    static let installation = "install-1"
    static let tokenA = "fcm-token-aaaaaaaaaaaaaaaaaaaaaaaaaaaa-1111"
    static let tokenB = "fcm-token-bbbbbbbbbbbbbbbbbbbbbbbbbbbb-2222"

    /// A machine around its actions: every `handle` returns what it asked for, and the last
    /// request sent is kept to answer it.
    struct Harness {
        var machine: Machine
        var lastSent: (id: Machine.RequestID, request: Machine.Request)?
        var lastTimer: (id: Machine.TimerID, delay: Duration)?

        init(record: RegistrationRecord = RegistrationRecord(installationID: installation), policy: RetryPolicy = .standard) {
            machine = Machine(record: record, retryPolicy: policy)
        }

        @discardableResult
        mutating func handle(_ event: Machine.Event) -> [Machine.Action] {
            let actions = machine.handle(event)
            for action in actions {
                if case .send(let id, let request) = action { lastSent = (id, request) }
                if case .wait(let id, let delay) = action { lastTimer = (id, delay) }
            }
            return actions
        }

        /// Answers the last registration sent.
        @discardableResult
        mutating func answerRegistration(_ answer: Answer<Int64>, jitter: Double = 1) -> [Machine.Action] {
            guard let sent = lastSent, case .register = sent.request else {
                Issue.record("no registration was sent")
                return []
            }
            return handle(.registrationAnswered(sent.id, answer, jitter: jitter))
        }

        /// Answers the last deactivation sent.
        @discardableResult
        mutating func answerDeactivation(_ answer: Answer<Deactivated>, jitter: Double = 1) -> [Machine.Action] {
            guard let sent = lastSent, case .deactivate = sent.request else {
                Issue.record("no deactivation was sent")
                return []
            }
            return handle(.deactivationAnswered(sent.id, answer, jitter: jitter))
        }

        /// Signed in as `account` with `token`, registered as `row`.
        mutating func registered(_ account: String = "alice", token: String = tokenA, row: Int64 = 10) {
            handle(.started)
            handle(.signedIn(account: account))
            handle(.fcmTokenReceived(token))
            answerRegistration(.success(row))
        }
    }

    static func requests(_ actions: [Machine.Action]) -> [Machine.Request] {
        actions.compactMap { if case .send(_, let request) = $0 { request } else { nil } }
    }

    static func register(_ account: String, _ token: String, fresh: Bool = false) -> Machine.Request {
        .register(account: account, fcmToken: token, installationID: installation, freshAccessToken: fresh)
    }

    static func deactivate(_ account: String, row: Int64?, token: String?, fresh: Bool = false) -> Machine.Request {
        .deactivate(
            Deactivation(account: account, deviceRowID: row, accessToken: token), installationID: installation, freshAccessToken: fresh)
    }

    static func logs(_ actions: [Machine.Action], _ level: LogLevel) -> [String] {
        actions.compactMap { if case .log(level, let line) = $0 { line } else { nil } }
    }

    @Test func firstLoginRegistersOnceTheTokenAndTheSessionAreBothThere() {
        var harness = Harness()
        harness.handle(.started)
        #expect(Self.requests(harness.handle(.signedIn(account: "alice"))).isEmpty)
        #expect(harness.machine.status.phase == .waitingForFCMToken)
        #expect(Self.requests(harness.handle(.fcmTokenReceived(Self.tokenA))) == [Self.register("alice", Self.tokenA)])
        #expect(harness.machine.status.phase == .registering)
        let logged = harness.answerRegistration(.success(10))
        #expect(harness.machine.status == RegistrationStatus(phase: .registered(deviceRowID: 10), pendingDeactivations: 0))
        #expect(harness.machine.record.registration == ServerRegistration(account: "alice", fcmToken: Self.tokenA, deviceRowID: 10))
        // Logged masked: never the whole token.
        let lines = Self.logs(logged, .info)
        #expect(lines.count == 1 && !lines[0].contains(Self.tokenA))
        #expect(lines.first?.contains("fcm-to…1111") == true)
    }

    /// The auto-login timing bug: the saved session comes back before Firebase has a token.
    @Test func autoLoginBeforeTheTokenRegistersWhenTheTokenComes() {
        var harness = Harness()
        harness.handle(.started)
        harness.handle(.signedIn(account: "alice"))
        #expect(harness.lastSent == nil)
        #expect(Self.requests(harness.handle(.fcmTokenReceived(Self.tokenA))) == [Self.register("alice", Self.tokenA)])
    }

    @Test func eachLaunchRegistersOnceAgainToKeepTheRowFresh() {
        var first = Harness()
        first.registered()
        // The next launch: the record as saved, the session not handed over yet.
        var harness = Harness(record: first.machine.record)
        #expect(Self.requests(harness.handle(.started)).isEmpty)
        #expect(Self.requests(harness.handle(.fcmTokenReceived(Self.tokenA))).isEmpty)
        #expect(harness.machine.status.phase == .registered(deviceRowID: 10))
        #expect(Self.requests(harness.handle(.signedIn(account: "alice"))) == [Self.register("alice", Self.tokenA)])
        harness.answerRegistration(.success(10))
        #expect(Self.requests(harness.handle(.signedIn(account: "alice"))).isEmpty)
    }

    @Test func duplicateEventsSendNothingTwice() {
        var harness = Harness()
        harness.handle(.started)
        var sent = Self.requests(harness.handle(.signedIn(account: "alice")))
        sent += Self.requests(harness.handle(.fcmTokenReceived(Self.tokenA)))
        // While the registration is on its way, and after it is answered.
        sent += Self.requests(harness.handle(.signedIn(account: "alice")))
        sent += Self.requests(harness.handle(.fcmTokenReceived(Self.tokenA)))
        sent += Self.requests(harness.handle(.permissionChanged(granted: true)))
        sent += Self.requests(harness.answerRegistration(.success(10)))
        sent += Self.requests(harness.handle(.fcmTokenReceived(Self.tokenA)))
        sent += Self.requests(harness.handle(.signedIn(account: "alice")))
        #expect(sent == [Self.register("alice", Self.tokenA)])

        sent = Self.requests(harness.handle(.signedOut(accessToken: "jwt-alice")))
        sent += Self.requests(harness.handle(.signedOut(accessToken: "jwt-alice")))
        sent += Self.requests(harness.answerDeactivation(.success(.device(10))))
        sent += Self.requests(harness.handle(.signedOut(accessToken: nil)))
        #expect(sent == [Self.deactivate("alice", row: 10, token: "jwt-alice")])
    }

    @Test func tokenRefreshRegistersTheNewTokenOnce() {
        var harness = Harness()
        harness.registered()
        #expect(Self.requests(harness.handle(.fcmTokenReceived(Self.tokenB))) == [Self.register("alice", Self.tokenB)])
        harness.answerRegistration(.success(11))
        #expect(harness.machine.status.phase == .registered(deviceRowID: 11))
    }

    /// A refresh on its way while the old token's registration is answered: the new one follows.
    @Test func tokenRefreshDuringARegistrationSendsTheNewTokenAfterIt() {
        var harness = Harness()
        harness.handle(.started)
        harness.handle(.signedIn(account: "alice"))
        harness.handle(.fcmTokenReceived(Self.tokenA))
        #expect(Self.requests(harness.handle(.fcmTokenReceived(Self.tokenB))).isEmpty)
        #expect(Self.requests(harness.answerRegistration(.success(10))) == [Self.register("alice", Self.tokenB)])
    }

    @Test func logoutDeactivatesWithTheTokenTakenAtSignOut() {
        var harness = Harness()
        harness.registered()
        let actions = harness.handle(.signedOut(accessToken: "jwt-alice"))
        #expect(Self.requests(actions) == [Self.deactivate("alice", row: 10, token: "jwt-alice")])
        // Saved before it is sent: a kill now still owes it at the next launch.
        guard case .save(let record) = actions.first else {
            Issue.record("not saved first: \(actions)")
            return
        }
        #expect(record.deactivations == [Deactivation(account: "alice", deviceRowID: 10, accessToken: "jwt-alice")])
        #expect(harness.machine.status == RegistrationStatus(phase: .signedOut, pendingDeactivations: 1))
        harness.answerDeactivation(.success(.device(10)))
        #expect(harness.machine.status == RegistrationStatus(phase: .signedOut, pendingDeactivations: 0))
        #expect(harness.machine.record.deactivations.isEmpty && harness.machine.record.registration == nil)
    }

    /// Logout wins: a refresh after it, or during its deactivation, registers nothing.
    @Test func aRefreshAfterSignOutNeverRegisters() {
        var harness = Harness()
        harness.registered()
        harness.handle(.signedOut(accessToken: "jwt-alice"))
        #expect(Self.requests(harness.handle(.fcmTokenReceived(Self.tokenB))).isEmpty)
        #expect(Self.requests(harness.answerDeactivation(.success(.device(10)))).isEmpty)
        #expect(Self.requests(harness.handle(.fcmTokenReceived("fcm-token-cccccccccccccccccccc-3333"))).isEmpty)
        #expect(harness.machine.status.isSettled)
        // The next sign-in registers the latest token.
        #expect(
            Self.requests(harness.handle(.signedIn(account: "alice"))) == [Self.register("alice", "fcm-token-cccccccccccccccccccc-3333")])
    }

    /// Signed out while the registration was on its way: its row is deactivated as soon as its
    /// answer names it, and it is never sent again.
    @Test func logoutWhileARegistrationIsInFlightDeactivatesTheRowItMade() {
        var harness = Harness()
        harness.handle(.started)
        harness.handle(.signedIn(account: "alice"))
        harness.handle(.fcmTokenReceived(Self.tokenA))
        #expect(Self.requests(harness.handle(.signedOut(accessToken: "jwt-alice"))).isEmpty)  // one request at a time
        #expect(Self.requests(harness.answerRegistration(.success(10))) == [Self.deactivate("alice", row: 10, token: "jwt-alice")])
    }

    /// Signed out after a registration whose answer never came: the row, if it was made, is found
    /// by this installation's deviceId; the registration is not retried.
    @Test func logoutAfterAnUnansweredRegistrationLooksTheRowUp() {
        var harness = Harness()
        harness.handle(.started)
        harness.handle(.signedIn(account: "alice"))
        harness.handle(.fcmTokenReceived(Self.tokenA))
        harness.answerRegistration(.retry(after: nil, reason: "offline"))
        guard let timer = harness.lastTimer else {
            Issue.record("no retry scheduled")
            return
        }
        #expect(harness.machine.status.phase == .retrying(failures: 1))
        #expect(Self.requests(harness.handle(.signedOut(accessToken: "jwt-alice"))).isEmpty)  // still waiting
        #expect(Self.requests(harness.handle(.retryDue(timer.id))) == [Self.deactivate("alice", row: nil, token: "jwt-alice")])
        #expect(Self.requests(harness.answerDeactivation(.success(.nothingActive))).isEmpty)
        #expect(harness.machine.status.isSettled && harness.machine.record.unansweredRegistration == nil)
    }

    /// An answer that fails after the sign-out is not retried either.
    @Test func aRegistrationFailingAfterSignOutIsNotRetried() {
        var harness = Harness()
        harness.handle(.started)
        harness.handle(.signedIn(account: "alice"))
        harness.handle(.fcmTokenReceived(Self.tokenA))
        harness.handle(.signedOut(accessToken: "jwt-alice"))
        let actions = harness.answerRegistration(.retry(after: nil, reason: "HTTP 503"))
        #expect(Self.requests(actions) == [Self.deactivate("alice", row: nil, token: "jwt-alice")])
        #expect(!actions.contains { if case .wait = $0 { true } else { false } })
    }

    @Test func accountSwitchDeactivatesTheOldAccountBeforeRegisteringTheNewOne() {
        var harness = Harness()
        harness.registered("alice")
        var sent = Self.requests(harness.handle(.signedOut(accessToken: "jwt-alice")))
        sent += Self.requests(harness.handle(.signedIn(account: "bob")))
        #expect(sent == [Self.deactivate("alice", row: 10, token: "jwt-alice")])
        #expect(harness.machine.status.phase == .registering)
        #expect(Self.requests(harness.answerDeactivation(.success(.device(10)))) == [Self.register("bob", Self.tokenA)])
        harness.answerRegistration(.success(11))
        #expect(harness.machine.status == RegistrationStatus(phase: .registered(deviceRowID: 11), pendingDeactivations: 0))
    }

    /// Deactivations wait behind each other and the registration behind them, even failing.
    @Test func theNewAccountWaitsWhileTheOldAccountsDeactivationIsRetried() {
        var harness = Harness()
        harness.registered("alice")
        harness.handle(.signedOut(accessToken: "jwt-alice"))
        harness.handle(.signedIn(account: "bob"))
        #expect(Self.requests(harness.answerDeactivation(.retry(after: .seconds(2), reason: "HTTP 503"))).isEmpty)
        guard let timer = harness.lastTimer else {
            Issue.record("no retry scheduled")
            return
        }
        #expect(timer.delay == .seconds(2))
        #expect(Self.requests(harness.handle(.retryDue(timer.id))) == [Self.deactivate("alice", row: 10, token: "jwt-alice")])
        #expect(Self.requests(harness.answerDeactivation(.success(.device(10)))) == [Self.register("bob", Self.tokenA)])
    }

    /// A switch the app did not announce with a sign-out: no token for the old account, so its
    /// deactivation is dropped, saying so (push-api's account switch rule covers the same token).
    @Test func aSwitchWithoutSignOutWarnsThatTheOldRowCannotBeDeactivated() {
        var harness = Harness()
        harness.registered("alice")
        let actions = harness.handle(.signedIn(account: "bob"))
        #expect(Self.requests(actions) == [Self.register("bob", Self.tokenA)])
        #expect(Self.logs(actions, .warning).contains { $0.contains("cannot deactivate the registration of account alice") })
        #expect(harness.machine.record.deactivations.isEmpty)
    }

    /// Signed out and in again as the same account while the registration was on its way: the
    /// deactivation goes first, then the registration again, so the row ends active.
    @Test func signOutAndBackInWhileRegisteringEndsRegistered() {
        var harness = Harness()
        harness.handle(.started)
        harness.handle(.signedIn(account: "alice"))
        harness.handle(.fcmTokenReceived(Self.tokenA))
        harness.handle(.signedOut(accessToken: "jwt-alice"))
        harness.handle(.signedIn(account: "alice"))
        #expect(Self.requests(harness.answerRegistration(.success(10))) == [Self.deactivate("alice", row: 10, token: "jwt-alice")])
        #expect(Self.requests(harness.answerDeactivation(.success(.device(10)))) == [Self.register("alice", Self.tokenA)])
        harness.answerRegistration(.success(10))
        #expect(harness.machine.status == RegistrationStatus(phase: .registered(deviceRowID: 10), pendingDeactivations: 0))
    }

    @Test func permissionDeniedRegistersNothingAndSaysSo() {
        var harness = Harness()
        harness.handle(.started)
        let denied = harness.handle(.permissionChanged(granted: false))
        #expect(Self.logs(denied, .warning).count == 1)
        harness.handle(.signedIn(account: "alice"))
        #expect(Self.requests(harness.handle(.fcmTokenReceived(Self.tokenA))).isEmpty)
        #expect(harness.machine.status.phase == .permissionDenied && harness.machine.status.isSettled)
        // Allowed later, in Settings.
        #expect(Self.requests(harness.handle(.permissionChanged(granted: true))) == [Self.register("alice", Self.tokenA)])
    }

    @Test func permissionTurnedOffDeactivatesWithTheSessionsProvider() {
        var harness = Harness()
        harness.registered()
        #expect(Self.requests(harness.handle(.permissionChanged(granted: false))) == [Self.deactivate("alice", row: 10, token: nil)])
        harness.answerDeactivation(.success(.device(10)))
        #expect(harness.machine.status == RegistrationStatus(phase: .permissionDenied, pendingDeactivations: 0))
    }

    @Test func backoffGrowsFromOneSecondToItsCapAndResetsOnSuccess() {
        var harness = Harness(policy: RetryPolicy(initialDelay: .seconds(1), maximumDelay: .seconds(8)))
        harness.handle(.started)
        harness.handle(.signedIn(account: "alice"))
        harness.handle(.fcmTokenReceived(Self.tokenA))
        var delays: [Duration] = []
        for _ in 0..<6 {
            harness.answerRegistration(.retry(after: nil, reason: "offline"), jitter: 1)
            guard let timer = harness.lastTimer else { break }
            delays.append(timer.delay)
            // Nothing goes out before the wait ends, whatever happens meanwhile.
            #expect(Self.requests(harness.handle(.fcmTokenReceived(Self.tokenA))).isEmpty)
            #expect(Self.requests(harness.handle(.retryDue(timer.id))) == [Self.register("alice", Self.tokenA)])
        }
        #expect(delays == [.seconds(1), .seconds(2), .seconds(4), .seconds(8), .seconds(8), .seconds(8)])
        #expect(harness.machine.status.phase == .retrying(failures: 6))
        harness.answerRegistration(.success(10))
        harness.handle(.fcmTokenReceived(Self.tokenB))
        harness.answerRegistration(.retry(after: nil, reason: "offline"), jitter: 0)
        #expect(harness.lastTimer?.delay == .milliseconds(500))  // the first failure again, jittered to half
    }

    @Test func retryAfterIsHonoured() {
        var harness = Harness()
        harness.handle(.started)
        harness.handle(.signedIn(account: "alice"))
        harness.handle(.fcmTokenReceived(Self.tokenA))
        harness.answerRegistration(.retry(after: .seconds(42), reason: "HTTP 429 RATE_LIMITED"))
        #expect(harness.lastTimer?.delay == .seconds(42))
    }

    /// A stale timer (from before a restart of `run()`) or an answer to a request no longer in
    /// flight changes nothing.
    @Test func staleTimersAndAnswersAreIgnored() {
        var harness = Harness()
        harness.handle(.started)
        harness.handle(.signedIn(account: "alice"))
        harness.handle(.fcmTokenReceived(Self.tokenA))
        guard let sent = harness.lastSent else {
            Issue.record("nothing sent")
            return
        }
        harness.handle(.stopped)
        // A new run() sends it again; the old request's answer is not its answer.
        #expect(Self.requests(harness.handle(.started)) == [Self.register("alice", Self.tokenA)])
        #expect(harness.handle(.registrationAnswered(sent.id, .success(99), jitter: 1)).isEmpty)
        #expect(harness.handle(.retryDue(Machine.TimerID(value: 12345))).isEmpty)
        harness.answerRegistration(.success(10))
        #expect(harness.machine.status.phase == .registered(deviceRowID: 10))
    }

    @Test func nothingIsSentWhileRunIsNotRunning() {
        var harness = Harness()
        harness.handle(.signedIn(account: "alice"))
        #expect(Self.requests(harness.handle(.fcmTokenReceived(Self.tokenA))).isEmpty)
        #expect(Self.requests(harness.handle(.started)) == [Self.register("alice", Self.tokenA)])
    }

    @Test func a401AsksForAFreshAccessTokenOnceThenGivesUp() {
        var harness = Harness()
        harness.handle(.started)
        harness.handle(.signedIn(account: "alice"))
        harness.handle(.fcmTokenReceived(Self.tokenA))
        #expect(Self.requests(harness.answerRegistration(.unauthorized)) == [Self.register("alice", Self.tokenA, fresh: true)])
        let gaveUp = harness.answerRegistration(.unauthorized)
        #expect(Self.requests(gaveUp).isEmpty)
        #expect(Self.logs(gaveUp, .error).count == 1)
        guard case .refused = harness.machine.status.phase else {
            Issue.record("not refused: \(harness.machine.status)")
            return
        }
        // Refused is for this wish only: a new token is tried.
        #expect(Self.requests(harness.handle(.fcmTokenReceived(Self.tokenB))) == [Self.register("alice", Self.tokenB)])
    }

    @Test func aRefusalIsLoggedWithItsReasonAndNotRetried() {
        var harness = Harness()
        harness.handle(.started)
        harness.handle(.signedIn(account: "alice"))
        harness.handle(.fcmTokenReceived(Self.tokenA))
        let reason = "HTTP 403 FORBIDDEN: the token's appId is not a registered app"
        let actions = harness.answerRegistration(.refused(reason: reason))
        #expect(Self.requests(actions).isEmpty && !actions.contains { if case .wait = $0 { true } else { false } })
        #expect(Self.logs(actions, .error).first?.contains(reason) == true)
        #expect(harness.machine.status == RegistrationStatus(phase: .refused(reason: reason), pendingDeactivations: 0))
        #expect(harness.machine.status.isSettled)
    }

    @Test func aDeactivationWhoseTokenIsRefusedIsGivenUpWithItsReason() {
        var harness = Harness()
        harness.registered()
        harness.handle(.signedOut(accessToken: "expired-jwt"))
        #expect(
            Self.requests(harness.answerDeactivation(.unauthorized)) == [
                Self.deactivate("alice", row: 10, token: "expired-jwt", fresh: true)
            ])
        let gaveUp = harness.answerDeactivation(.unauthorized)
        #expect(Self.logs(gaveUp, .error).first?.contains("deactivation for account alice given up") == true)
        #expect(harness.machine.status == RegistrationStatus(phase: .signedOut, pendingDeactivations: 0))
    }

    /// What the last launch owed is sent at the next start, before anyone signs in.
    @Test func aSavedDeactivationIsSentAtStartWithoutASession() {
        var first = Harness()
        first.registered()
        first.handle(.stopped)  // killed before the logout went out
        first.handle(.signedOut(accessToken: "jwt-alice"))
        var harness = Harness(record: first.machine.record)
        #expect(Self.requests(harness.handle(.started)) == [Self.deactivate("alice", row: 10, token: "jwt-alice")])
    }

    /// A sign-out without an access token (the app had none left) cannot deactivate: dropped,
    /// saying so, rather than kept forever.
    @Test func aSignOutWithoutAccessTokenDropsItsDeactivationWithAWarning() {
        var harness = Harness()
        harness.registered()
        let actions = harness.handle(.signedOut(accessToken: nil))
        #expect(Self.requests(actions).isEmpty)
        #expect(Self.logs(actions, .warning).count == 1)
        #expect(harness.machine.status == RegistrationStatus(phase: .signedOut, pendingDeactivations: 0))
    }
}
