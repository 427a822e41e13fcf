import DeviceRegistry
import Foundation
import PostgresNIO
import TestSupport
import Testing

@Suite("DeviceDirectory rules against PostgreSQL")
struct DeviceDirectoryTests {
    @Test func registerCreatesThenRefreshesTheSameRow() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            let registry = DeviceDirectory(client: client)
            let first = try await registry.register(registration("tok-1", deviceID: "phone-1"), userID: 7, appID: app, logger: testLogger)
            #expect(first.created)
            #expect(first.device.isActive)
            #expect(first.device.token == "tok-1" && first.device.deviceID == "phone-1" && first.device.platform == .ios)

            try await Task.sleep(for: .milliseconds(5))
            let second = try await registry.register(
                registration("tok-1", platform: "android", deviceID: "phone-1"), userID: 7, appID: app, logger: testLogger)
            #expect(!second.created)
            #expect(second.device.id == first.device.id)
            #expect(second.device.createdAt == first.device.createdAt)
            #expect(second.device.lastUsedAt > first.device.lastUsedAt)
            #expect(second.device.platform == .android)
            #expect(try await count(client, "SELECT count(*)::int FROM push_devices") == 1)
        }
    }

    @Test func sameRequestTwiceGivesTheSameAnswer() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            let registry = DeviceDirectory(client: client)
            let a = try await registry.register(registration("tok-twice"), userID: 1, appID: app, logger: testLogger)
            let b = try await registry.register(registration("tok-twice"), userID: 1, appID: app, logger: testLogger)
            #expect(a.device.id == b.device.id && a.device.token == b.device.token && a.device.isActive == b.device.isActive)
            #expect(a.device.createdAt == b.device.createdAt)
        }
    }

    @Test func anotherUsersActiveTokenIsDeactivatedAsAccountSwitch() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            let registry = DeviceDirectory(client: client)
            _ = try await registry.register(registration("shared-tok"), userID: 1, appID: app, logger: testLogger)
            _ = try await registry.register(registration("shared-tok"), userID: 2, appID: app, logger: testLogger)
            let state = try await rows(client, token: "shared-tok")
            try #require(state.count == 2)
            #expect(state[0].0 == 1 && state[0].1 == false && state[0].2 == "account_switch")
            #expect(state[1].0 == 2 && state[1].1 == true && state[1].2 == nil)
            // The old account's devices no longer include an active one.
            let old = try await registry.devices(appID: app, userID: 1, logger: testLogger)
            #expect(old.allSatisfy { !$0.isActive })
        }
    }

    @Test func sameTokenInAnotherAppIsIndependent() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let wowa = try await addApp(client, code: "wowa")
            let other = try await addApp(client, code: "other")
            let registry = DeviceDirectory(client: client)
            _ = try await registry.register(registration("tok-x"), userID: 1, appID: wowa, logger: testLogger)
            _ = try await registry.register(registration("tok-x"), userID: 2, appID: other, logger: testLogger)
            #expect(try await count(client, "SELECT count(*)::int FROM push_devices WHERE is_active") == 2)
        }
    }

    @Test func newTokenOnTheSameDeviceReplacesTheOldOne() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            let registry = DeviceDirectory(client: client)
            _ = try await registry.register(registration("old-tok", deviceID: "phone"), userID: 1, appID: app, logger: testLogger)
            _ = try await registry.register(registration("other-phone-tok", deviceID: "tablet"), userID: 1, appID: app, logger: testLogger)
            _ = try await registry.register(registration("new-tok", deviceID: "phone"), userID: 1, appID: app, logger: testLogger)
            #expect(try await rows(client, token: "old-tok").map { "\($0.1) \($0.2 ?? "-")" } == ["false replaced"])
            #expect(try await rows(client, token: "new-tok").map(\.1) == [true])
            // Multi-device: the tablet is untouched.
            #expect(try await rows(client, token: "other-phone-tok").map(\.1) == [true])
        }
    }

    /// The legitimate switch: the app on one phone registers its same FCM token for the new
    /// account. Possession of the token proves the phone; the old account's row goes.
    @Test func anotherAccountRegisteringTheSameTokenSwitchesAccounts() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            let registry = DeviceDirectory(client: client)
            _ = try await registry.register(registration("phone-tok", deviceID: "phone"), userID: 1, appID: app, logger: testLogger)
            _ = try await registry.register(registration("alice-tablet-tok", deviceID: "tablet"), userID: 1, appID: app, logger: testLogger)
            _ = try await registry.register(registration("phone-tok", deviceID: "phone"), userID: 2, appID: app, logger: testLogger)
            #expect(
                try await rows(client, token: "phone-tok").map { "\($0.0) \($0.1) \($0.2 ?? "-")" }
                    == ["1 false account_switch", "2 true -"])
            // Alice's other device is hers alone.
            #expect(try await rows(client, token: "alice-tablet-tok").map(\.1) == [true])
        }
    }

    /// The attack of issue 30: deviceId is a string the client chooses, so another user's
    /// registration with Alice's deviceId (and a token of their own) proves nothing about her
    /// phone and leaves her row as it was, wherever the deviceId appears.
    @Test func anotherUsersDeviceIDNeverTouchesTheOwnersRows() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            let registry = DeviceDirectory(client: client)
            let alice = try await registry.register(registration("alice-tok", deviceID: "phone"), userID: 1, appID: app, logger: testLogger)
            let bob = try await registry.register(registration("bob-tok", deviceID: "phone"), userID: 2, appID: app, logger: testLogger)
            let batch: [DeviceDirectory.Registration] = [
                .init(try registration("bob-tok-2", deviceID: "phone"), userID: 2, appID: app),
                .init(try registration("mallory-tok", deviceID: "phone"), userID: 3, appID: app),
            ]
            _ = try await registry.register(batch: batch, logger: testLogger)
            #expect(try await rows(client, token: "alice-tok").map { "\($0.1) \($0.2 ?? "-")" } == ["true -"])
            let aliceNow = try await registry.devices(appID: app, userID: 1, logger: testLogger)
            #expect(aliceNow.map(\.id) == [alice.device.id])
            #expect(aliceNow.first?.lastUsedAt == alice.device.lastUsedAt && aliceNow.first?.deviceID == "phone")
            // Bob's own refresh on "his" phone still replaces his older token there.
            #expect(try await rows(client, token: "bob-tok").map { "\($0.1) \($0.2 ?? "-")" } == ["false replaced"])
            #expect(bob.device.isActive)
            #expect(try await count(client, "SELECT count(*)::int FROM push_devices WHERE is_active") == 3)
        }
    }

    @Test func deactivateIsOwnerOnlySoftAndIdempotent() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            let registry = DeviceDirectory(client: client)
            let device = try await registry.register(registration("tok-logout"), userID: 1, appID: app, logger: testLogger).device

            #expect(try await registry.deactivate(deviceID: device.id, userID: 2, appID: app, logger: testLogger) == false)
            #expect(try await registry.deactivate(deviceID: device.id, userID: 1, appID: app + 1, logger: testLogger) == false)
            #expect(try await registry.deactivate(deviceID: 999_999, userID: 1, appID: app, logger: testLogger) == false)
            #expect(try await rows(client, token: "tok-logout").map(\.1) == [true])

            #expect(try await registry.deactivate(deviceID: device.id, userID: 1, appID: app, logger: testLogger))
            let afterFirst = try await registry.devices(appID: app, userID: 1, logger: testLogger)
            #expect(try await registry.deactivate(deviceID: device.id, userID: 1, appID: app, logger: testLogger))
            let afterSecond = try await registry.devices(appID: app, userID: 1, logger: testLogger)
            try #require(afterFirst.count == 1)
            #expect(afterFirst[0].isActive == false && afterFirst[0].deactivationReason == .logout)
            #expect(afterFirst[0].deactivatedAt != nil)
            // The second call changed nothing, not even the timestamp.
            #expect(afterSecond == afterFirst)
        }
    }

    /// A logout that arrives after a token refresh it raced (the app still held the old row's
    /// id) wins: the refreshed token on that device goes too, the user's other devices stay.
    @Test func aLogoutWinsOverTheRefreshItRaced() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            let registry = DeviceDirectory(client: client)
            let old = try await registry.register(
                registration("tok-before-refresh", deviceID: "phone-1"), userID: 1, appID: app, logger: testLogger
            ).device
            _ = try await registry.register(
                registration("tok-after-refresh", deviceID: "phone-1"), userID: 1, appID: app, logger: testLogger)
            _ = try await registry.register(registration("tok-tablet", deviceID: "tablet-1"), userID: 1, appID: app, logger: testLogger)
            _ = try await registry.register(registration("tok-other-user", deviceID: "phone-2"), userID: 2, appID: app, logger: testLogger)
            #expect(try await registry.deactivate(deviceID: old.id, userID: 1, appID: app, logger: testLogger))
            #expect(try await rows(client, token: "tok-before-refresh").map { $0.2 } == ["replaced"])
            #expect(try await rows(client, token: "tok-after-refresh").map { $0.2 } == ["logout"])
            #expect(try await rows(client, token: "tok-tablet").map { $0.1 } == [true])
            #expect(try await rows(client, token: "tok-other-user").map { $0.1 } == [true])
        }
    }

    /// The same race with the refresh still in its transaction when the logout arrives: the
    /// logout waits for it, then covers its new row. (As one UPDATE, the logout waited on the
    /// old row's lock, found that row already replaced, and missed the new one: the signed-out
    /// phone kept receiving, and DELETE answered 204.)
    @Test func aLogoutWaitingOnARefreshInFlightCoversItsNewRow() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            let registry = DeviceDirectory(client: client)
            let old = try await registry.register(
                registration("tok-held-old", deviceID: "phone-1"), userID: 1, appID: app, logger: testLogger
            ).device
            try await client.withConnection { refresh in
                try await refresh.query("BEGIN", logger: testLogger)
                _ = try await refresh.query(
                    "SELECT id FROM push_register_device(1, \(app), 'tok-held-new', 'android', 'phone-1')", logger: testLogger
                ).collect()
                async let logout = registry.deactivate(deviceID: old.id, userID: 1, appID: app, logger: testLogger)
                // The refresh commits only once the logout waits for it.
                let waiting: PostgresQuery = """
                    SELECT count(*)::int FROM pg_stat_activity
                     WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()
                    """
                let deadline = ContinuousClock.now + .seconds(10)
                while try await count(client, waiting) == 0 && ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(10))
                }
                #expect(try await count(client, waiting) == 1)
                try await refresh.query("COMMIT", logger: testLogger)
                #expect(try await logout)
            }
            #expect(try await rows(client, token: "tok-held-old").map { $0.2 } == ["replaced"])
            #expect(try await rows(client, token: "tok-held-new").map { $0.2 } == ["logout"])
        }
    }

    @Test func registeringAgainAfterLogoutReactivatesTheRow() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            let registry = DeviceDirectory(client: client)
            let first = try await registry.register(registration("tok-back"), userID: 1, appID: app, logger: testLogger).device
            _ = try await registry.deactivate(deviceID: first.id, userID: 1, appID: app, logger: testLogger)
            let again = try await registry.register(registration("tok-back"), userID: 1, appID: app, logger: testLogger)
            #expect(!again.created && again.device.id == first.id && again.device.isActive)
            let listed = try await registry.devices(appID: app, userID: 1, logger: testLogger)
            #expect(listed.first?.deactivatedAt == nil && listed.first?.deactivationReason == nil)
        }
    }

    @Test func theDatabaseItselfRefusesTwoActiveOwners() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            try await client.query("INSERT INTO push_devices (user_id, app_id, token, platform) VALUES (1, \(app), 'dup', 'ios')")
            await #expect(throws: PSQLError.self) {
                try await client.query("INSERT INTO push_devices (user_id, app_id, token, platform) VALUES (2, \(app), 'dup', 'ios')")
            }
            await #expect(throws: PSQLError.self) {
                try await client.query("INSERT INTO push_devices (user_id, app_id, token, platform) VALUES (3, \(app), 'has space', 'ios')")
            }
            await #expect(throws: PSQLError.self) {
                try await client.query("UPDATE push_devices SET is_active = false")  // no deactivated_at / reason
            }
        }
    }

    /// Beyond the cap, the user's least recently registered device goes (`device_limit`); a
    /// refresh counts as a registration, and re-registering an active token adds nothing.
    @Test func theLeastRecentlyRegisteredDeviceGoesBeyondTheCap() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            let registry = DeviceDirectory(client: client)
            func register(_ token: String, user: Int64 = 1) async throws {
                _ = try await registry.register(
                    registration(token), userID: user, appID: app,
                    maximumActiveDevices: 3, logger: testLogger)
            }
            for token in ["tok-1", "tok-2", "tok-3"] { try await register(token) }
            try await register("tok-1")  // refreshed: now the most recent
            try await register("tok-3")  // already active at the cap: nothing goes
            #expect(try await activeTokens(client, user: 1) == ["tok-1", "tok-2", "tok-3"])
            try await register("tok-4")
            #expect(try await rows(client, token: "tok-2").map { "\($0.1) \($0.2 ?? "-")" } == ["false device_limit"])
            #expect(try await activeTokens(client, user: 1) == ["tok-1", "tok-3", "tok-4"])
            // Another user, and the same user in another app, have their own caps.
            let other = try await addApp(client, code: "other")
            for token in ["u2-a", "u2-b", "u2-c"] { try await register(token, user: 2) }
            _ = try await registry.register(registration("other-app"), userID: 1, appID: other, maximumActiveDevices: 1, logger: testLogger)
            #expect(try await activeTokens(client, user: 1) == ["other-app", "tok-1", "tok-3", "tok-4"])
            #expect(try await activeTokens(client, user: 2) == ["u2-a", "u2-b", "u2-c"])
        }
    }

    @Test func aRefreshOnTheSameDeviceNeverCostsAnotherDevice() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            let registry = DeviceDirectory(client: client)
            for (token, device) in [("phone-old", "phone"), ("tablet", "tablet")] {
                _ = try await registry.register(
                    registration(token, deviceID: device), userID: 1, appID: app,
                    maximumActiveDevices: 2, logger: testLogger)
            }
            _ = try await registry.register(
                registration("phone-new", deviceID: "phone"), userID: 1, appID: app,
                maximumActiveDevices: 2, logger: testLogger)
            #expect(try await rows(client, token: "phone-old").map { $0.2 } == ["replaced"])
            #expect(try await activeTokens(client, user: 1) == ["phone-new", "tablet"])
        }
    }

    /// A user already over the cap (a lower setting, or rows from before it) is brought down to
    /// it by their next registration, the oldest first.
    @Test func aUserOverTheCapIsTrimmedByTheirNextRegistration() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            let registry = DeviceDirectory(client: client)
            for index in 1...6 {
                _ = try await registry.register(
                    registration("tok-\(index)"), userID: 1, appID: app, maximumActiveDevices: 10, logger: testLogger)
            }
            _ = try await registry.register(registration("tok-7"), userID: 1, appID: app, maximumActiveDevices: 2, logger: testLogger)
            #expect(try await activeTokens(client, user: 1) == ["tok-6", "tok-7"])
            #expect(try await count(client, "SELECT count(*)::int FROM push_devices WHERE deactivation_reason = 'device_limit'") == 5)
        }
    }

    /// In a batch (one transaction, one now()), registrations are still ranked in arrival order.
    @Test func aBatchKeepsTheCapInArrivalOrder() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            let registry = DeviceDirectory(client: client)
            _ = try await registry.register(registration("tok-before"), userID: 1, appID: app, logger: testLogger)
            let batch: [DeviceDirectory.Registration] = try ["tok-a", "tok-b", "tok-before", "tok-c", "tok-d"].map {
                .init(try registration($0), userID: 1, appID: app)
            }
            let answers = try await registry.register(batch: batch, maximumActiveDevices: 3, logger: testLogger)
            #expect(answers.allSatisfy { $0.device.isActive })
            #expect(try await activeTokens(client, user: 1) == ["tok-before", "tok-c", "tok-d"])
            #expect(try await rows(client, token: "tok-a").map { $0.2 } == ["device_limit"])
            #expect(try await rows(client, token: "tok-b").map { $0.2 } == ["device_limit"])
        }
    }

    @Test func aCapBelowOneIsRefusedAndChangesNothing() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            let registry = DeviceDirectory(client: client)
            _ = try await registry.register(registration("tok-kept"), userID: 1, appID: app, logger: testLogger)
            for cap in [0, -1] {
                await #expect {
                    _ = try await registry.register(
                        registration("tok-new"), userID: 1, appID: app, maximumActiveDevices: cap, logger: testLogger)
                } throws: { error in
                    DatabaseErrorText.sqlState(error) == .invalidParameterValue
                        && DatabaseErrorText.describe(error).contains("max active devices must be at least 1")
                }
            }
            #expect(try await activeTokens(client, user: 1) == ["tok-kept"])
            #expect(try await count(client, "SELECT count(*)::int FROM push_devices") == 1)
        }
    }

    /// Callers of the SQL function that do not pass a cap (backends, the benchmarks) get the
    /// same one as push-api's default.
    @Test func theSQLDefaultCapIsTheRegistrysDefault() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            var arguments = ""
            for try await text in try await client.query(
                "SELECT pg_get_function_arguments('push_register_device'::regproc)"
            ).decode(String.self) {
                arguments = text
            }
            #expect(
                arguments.hasSuffix("p_max_active_devices integer DEFAULT \(DeviceDirectory.defaultMaximumActiveDevices)"), "\(arguments)")
        }
    }

    /// Pages of a user's devices, newest registration first: every row once, whatever is
    /// refreshed while the pages are read.
    @Test func pagesListEveryDeviceOnceNewestFirst() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            let registry = DeviceDirectory(client: client)
            var ids: [Int64] = []
            for index in 1...5 {
                ids.append(try await registry.register(registration("tok-\(index)"), userID: 1, appID: app, logger: testLogger).device.id)
            }
            _ = try await registry.register(registration("someone-elses"), userID: 2, appID: app, logger: testLogger)
            var listed: [Int64] = []
            var cursor: Int64?
            var pages = 0
            repeat {
                let page = try await registry.page(appID: app, userID: 1, below: cursor, limit: 2, logger: testLogger)
                listed += page.devices.map(\.id)
                cursor = page.nextCursor
                pages += 1
                // Refreshing the oldest between pages moves nothing.
                _ = try await registry.register(registration("tok-1"), userID: 1, appID: app, logger: testLogger)
            } while cursor != nil
            #expect(pages == 3)
            #expect(listed == ids.reversed())
            let exact = try await registry.page(appID: app, userID: 1, below: nil, limit: 5, logger: testLogger)
            #expect(exact.devices.count == 5 && exact.nextCursor == nil)
            #expect(try await registry.page(appID: app, userID: 1, below: ids[0], limit: 5, logger: testLogger).devices.isEmpty)
        }
    }

    @Test func unknownAppIsRefusedByTheForeignKey() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            await #expect(throws: PSQLError.self) {
                _ = try await DeviceDirectory(client: client).register(registration("tok"), userID: 1, appID: 4242, logger: testLogger)
            }
            let rows = try await count(client, "SELECT count(*)::int FROM push_devices")
            #expect(rows == 0)
        }
    }
}

@Suite("Concurrent registrations")
struct ConcurrencyTests {
    /// Many accounts racing for one token (two accounts at once on one phone): never two active
    /// owners, never an error.
    @Test func racingAccountsLeaveExactlyOneActiveOwner() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            let registry = DeviceDirectory(client: client)
            for round in 0..<5 {
                let token = "race-\(round)"
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for user in 1...40 {
                        group.addTask {
                            _ = try await registry.register(
                                registration(token, deviceID: "phone-\(user % 3)"), userID: Int64(user), appID: app, logger: testLogger)
                        }
                    }
                    try await group.waitForAll()
                }
                #expect(try await count(client, "SELECT count(*)::int FROM push_devices WHERE token = \(token) AND is_active") == 1)
                #expect(try await count(client, "SELECT count(*)::int FROM push_devices WHERE token = \(token)") == 40)
            }
        }
    }

    /// Rapid login/logout of one token: every call succeeds and the final state is consistent
    /// with the last call that ran.
    @Test func rapidLoginLogoutNeverFailsNorDuplicates() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            let registry = DeviceDirectory(client: client)
            let id = try await registry.register(registration("flip"), userID: 1, appID: app, logger: testLogger).device.id
            try await withThrowingTaskGroup(of: Void.self) { group in
                for i in 0..<100 {
                    group.addTask {
                        if i.isMultiple(of: 2) {
                            let again = try await registry.register(registration("flip"), userID: 1, appID: app, logger: testLogger)
                            #expect(again.device.id == id)
                        } else {
                            #expect(try await registry.deactivate(deviceID: id, userID: 1, appID: app, logger: testLogger))
                        }
                    }
                }
                try await group.waitForAll()
            }
            #expect(try await count(client, "SELECT count(*)::int FROM push_devices") == 1)
        }
    }

    /// Crossed token/device pairs are the registrations whose locks can deadlock in PostgreSQL;
    /// the registry retries them, so callers only ever see success.
    @Test func crossedTokensAndDevicesNeverSurfaceAnError() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            let registry = DeviceDirectory(client: client)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for i in 0..<200 {
                    group.addTask {
                        let user = Int64(i % 4)
                        _ = try await registry.register(
                            registration("tok-\(i % 5)", deviceID: "dev-\((i / 5) % 3)"), userID: user, appID: app, logger: testLogger)
                    }
                }
                try await group.waitForAll()
            }
            #expect(
                try await count(
                    client,
                    """
                    SELECT count(*)::int FROM (SELECT token FROM push_devices WHERE is_active GROUP BY app_id, token HAVING count(*) > 1) t
                    """) == 0)
        }
    }

    /// A batch runs each registration in order in one transaction: the answers are what one
    /// call each would give, including a repeat within the batch and an account switch.
    @Test func aBatchRegistersInOrderAsSingleCallsWould() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            let registry = DeviceDirectory(client: client)
            let existing = try await registry.register(
                registration("tok-old", deviceID: "phone-9"), userID: 9, appID: app, logger: testLogger)
            let batch: [DeviceDirectory.Registration] = [
                .init(try registration("tok-a", deviceID: "phone-1"), userID: 1, appID: app),
                .init(try registration("tok-old", platform: "android", deviceID: "phone-9"), userID: 9, appID: app),
                .init(try registration("tok-b", platform: "web", tokenType: "fid"), userID: 2, appID: app),
                .init(try registration("tok-a", deviceID: "phone-1"), userID: 1, appID: app),
                .init(try registration("tok-a", deviceID: "phone-1"), userID: 3, appID: app),
            ]
            let answers = try await registry.register(batch: batch, logger: testLogger)
            try #require(answers.count == 5)
            #expect(answers.map(\.created) == [true, false, true, false, true])
            #expect(answers.map(\.device.userID) == [1, 9, 2, 1, 3])
            #expect(answers[0].device.token == "tok-a" && answers[0].device.deviceID == "phone-1")
            #expect(answers[1].device.id == existing.device.id && answers[1].device.platform == .android)
            #expect(answers[1].device.createdAt == existing.device.createdAt)
            #expect(answers[2].device.deviceID == nil && answers[2].device.tokenType == .fid && answers[2].device.platform == .web)
            #expect(answers[3].device.id == answers[0].device.id)
            // The last one took the token over from user 1 (account switch) in the same transaction.
            let state = try await rows(client, token: "tok-a")
            try #require(state.count == 2)
            #expect(state[0].0 == 1 && state[0].1 == false && state[0].2 == "account_switch")
            #expect(state[1].0 == 3 && state[1].1 == true)
        }
    }

    /// All or nothing: one registration the database refuses (an app that does not exist) fails
    /// the batch, and none of its rows is written.
    @Test func aBatchFailsAsAWhole() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            let registry = DeviceDirectory(client: client)
            let batch: [DeviceDirectory.Registration] = [
                .init(try registration("tok-ok"), userID: 1, appID: app),
                .init(try registration("tok-no-app"), userID: 1, appID: app + 1000),
            ]
            await #expect {
                _ = try await registry.register(batch: batch, logger: testLogger)
            } throws: { DatabaseErrorText.sqlState($0) == .foreignKeyViolation }
            #expect(try await count(client, "SELECT count(*)::int FROM push_devices") == 0)
        }
    }
    /// A refused row is described by the server's message alone: PostgreSQL's DETAIL quotes the
    /// row, and with it a private key or a whole device token, into a log or a terminal.
    @Test func databaseErrorTextNeverQuotesTheRow() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            let secret = "-----BEGIN PRIVATE KEY-----SECRET-MATERIAL"
            await #expect {
                try await client.query(
                    "INSERT INTO apps (code, name, fcm_project_id, fcm_client_email, fcm_private_key) VALUES ('Not Valid', 'x', 'p', 'e', \(secret))"
                )
            } throws: { error in
                let text = DatabaseErrorText.describe(error)
                return text.hasPrefix("an app's code is 1 to 64 characters") && !text.contains("SECRET")
            }
            let token = "whole-device-token-" + String(repeating: "x", count: 100)
            await #expect {
                try await client.query("INSERT INTO push_devices (user_id, app_id, platform, token) VALUES (1, \(app), 'beos', \(token))")
            } throws: { error in
                let text = DatabaseErrorText.describe(error)
                return text.contains("violates check constraint") && !text.contains(token.prefix(21))
            }
        }
    }

    /// App names are limited in code points, as the table counts them: 150 flags are 150
    /// characters but 300 code points, refused before the database sees them.
    @Test func appNamesAreMeasuredInCodePoints() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let directory = AppDirectory(client: client, logger: testLogger)
            let flags = String(repeating: "🇰🇷", count: 150)
            await #expect(throws: AppDirectoryError.invalidName) {
                _ = try await directory.add(code: "flags", name: flags, serviceAccount: nil)
            }
            let added = try await directory.add(code: "flags", name: String(repeating: "🇰🇷", count: 100), serviceAccount: nil)
            #expect(added.code == "flags")
        }
    }
}
