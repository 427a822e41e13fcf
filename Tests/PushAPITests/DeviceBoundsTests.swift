import DeviceRegistry
import Foundation
import Hummingbird
import HummingbirdTesting
import PushAPI
import ServiceSupport
import TestSupport
import Testing

/// Issue 30's bounds, through the public surface: one user's deviceId never reaches another
/// user's rows, a cap on active devices, a registration rate, and pages of devices.
@Suite("Per-user bounds over HTTP")
struct DeviceBoundsTests {
    /// The legitimate account switch: the same phone (the same FCM token) signs in as another
    /// user; the old account's row is inactive with its reason, the new one's active.
    @Test func theSameTokenForANewUserSwitchesAccounts() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test { client in
            #expect(
                try await client.register(token: "fcm-token-of-the-shared-phone", as: fixture.token(user: 1), deviceID: "phone").status
                    == .created)
            #expect(
                try await client.register(token: "fcm-token-of-the-shared-phone", as: fixture.token(user: 2), deviceID: "phone").status
                    == .created)
            let old = try #require(try await client.devices(fixture.token(user: 1)).first)
            #expect(old["isActive"] as? Bool == false && old["deactivationReason"] as? String == "account_switch")
            let new = try #require(try await client.devices(fixture.token(user: 2)).first)
            #expect(new["isActive"] as? Bool == true && new["deactivationReason"] == nil)
        }
    }

    /// The attack: user 2 registers a token of their own with user 1's deviceId, alone and
    /// with a refresh; user 1's device is untouched.
    @Test func anotherUsersDeviceIDLeavesTheOwnersDeviceAlone() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test { client in
            let victim = try await client.register(token: "fcm-token-of-alices-pixel", as: fixture.token(user: 1), deviceID: "pixel-8-A1B2")
            #expect(victim.status == .created)
            for token in ["fcm-token-of-mallory-1", "fcm-token-of-mallory-2"] {
                #expect(try await client.register(token: token, as: fixture.token(user: 2), deviceID: "pixel-8-A1B2").status == .created)
            }
            let alice = try await client.devices(fixture.token(user: 1))
            #expect(alice.count == 1)
            #expect(alice.first?["id"] as? Int == victim.json["id"] as? Int)
            #expect(alice.first?["isActive"] as? Bool == true && alice.first?["deactivationReason"] == nil)
            #expect(alice.first?["lastUsedAt"] as? String == victim.json["lastUsedAt"] as? String)
            // Mallory's own second token on "that" device replaced her first: the rule still holds for her.
            let mallory = try await client.devices(fixture.token(user: 2))
            #expect(
                mallory.map { "\($0["token"] as? String ?? "") \($0["deactivationReason"] as? String ?? "active")" }
                    == ["fcm-token-of-mallory-2 active", "fcm-token-of-mallory-1 replaced"])
        }
    }

    @Test func beyondTheCapTheLeastRecentlyRegisteredDeviceGoes() async throws {
        let fixture = try await APIFixture.make()
        var configuration = fixture.configuration()
        configuration.registrationLimits.maximumActiveDevicesPerUser = 3
        try await buildApplication(configuration, logger: apiLogger).test(.router) { client in
            for token in ["old-phone", "tablet", "browser", "old-phone", "new-phone"] {
                #expect([200, 201].contains(try await client.register(token: token, as: fixture.token(user: 1)).status.code))
            }
            let devices = try await client.devices(fixture.token(user: 1))
            let state = Dictionary(
                uniqueKeysWithValues: devices.map {
                    ($0["token"] as? String ?? "", $0["deactivationReason"] as? String ?? "active")
                })
            #expect(state == ["old-phone": "active", "tablet": "device_limit", "browser": "active", "new-phone": "active"])
        }
    }

    /// Over the rate: 429 with Retry-After and the envelope, nothing written; other users and
    /// reading are unaffected.
    @Test func registrationsOverTheRateAnswer429WithRetryAfter() async throws {
        let fixture = try await APIFixture.make()
        var configuration = fixture.configuration()
        configuration.registrationLimits.registrationsPerUserPerMinute = 3
        try await buildApplication(configuration, logger: apiLogger).test(.router) { client in
            for index in 1...3 {
                #expect(try await client.register(token: "tok-\(index)", as: fixture.token(user: 1)).status == .created)
            }
            let refused = try await client.register(token: "tok-4", as: fixture.token(user: 1))
            #expect(refused.status == .tooManyRequests)
            #expect(refused.json["code"] as? String == "RATE_LIMITED")
            #expect(refused.json["status"] as? String == "TOO_MANY_REQUESTS")
            #expect(refused.json["message"] as? String == "more than 3 registrations a minute for this user; retry later")
            // One registration comes back every 20 s.
            let retryAfter = try #require(refused.headers[.retryAfter].flatMap { Int($0) })
            #expect((19...20).contains(retryAfter))
            #expect(try await client.devices(fixture.token(user: 1)).compactMap { $0["token"] as? String } == ["tok-3", "tok-2", "tok-1"])
            #expect(try await client.register(token: "tok-of-user-2", as: fixture.token(user: 2)).status == .created)
            // An invalid body is refused for what it is, and spends nothing.
            let invalid = try await client.send(.post, "/push/devices", token: fixture.token(user: 2), json: #"{"platform":"ios"}"#)
            #expect(invalid.status == .badRequest)
        }
    }

    @Test func devicesArePagedNewestFirst() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test { client in
            var ids: [Int] = []
            for index in 1...5 {
                ids.append(try #require(try await client.register(token: "tok-\(index)", as: fixture.token(user: 1)).json["id"] as? Int))
            }
            let all = try await client.send(.get, "/push/devices", token: fixture.token(user: 1))
            #expect(all.status == .ok)
            #expect((all.json["devices"] as? [[String: Any]])?.compactMap { $0["id"] as? Int } == ids.reversed())
            #expect(all.json["nextCursor"] is NSNull)

            var listed: [Int] = []
            var uri: String? = "/push/devices?limit=2"
            while let next = uri {
                let page = try await client.send(.get, next, token: fixture.token(user: 1))
                #expect(page.status == .ok)
                let devices = try #require(page.json["devices"] as? [[String: Any]])
                #expect(devices.count <= 2)
                listed += devices.compactMap { $0["id"] as? Int }
                uri = (page.json["nextCursor"] as? String).map { "/push/devices?limit=2&cursor=\($0)" }
            }
            #expect(listed == ids.reversed())
        }
    }

    @Test func badPageParametersAreRefusedByName() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test { client in
            let cases = [
                ("limit=0", "limit must be an integer in 1...200"),
                ("limit=201", "limit must be an integer in 1...200"),
                ("limit=ten", "limit must be an integer in 1...200"),
                ("cursor=-3", "cursor must be a nextCursor this endpoint returned"),
                ("cursor=", "cursor is empty; leave it out to not filter"),
                ("limit=1&limit=2", "limit is given twice"),
                ("after=5", "unknown query parameter after; expected one of cursor, limit"),
            ]
            for (query, message) in cases {
                let response = try await client.send(.get, "/push/devices?\(query)", token: fixture.token(user: 1))
                #expect(response.status == .badRequest, "\(query)")
                #expect(response.json["code"] as? String == "VALIDATION_FAILED")
                #expect(response.json["message"] as? String == message, "\(query)")
            }
        }
    }

    @Test func theBoundsComeFromTheEnvironment() throws {
        let database = ["DATABASE_URL": "postgres://u@h/d"]
        let defaults = try APIConfiguration.fromEnvironment(database).registrationLimits
        #expect(defaults == RegistrationLimits(maximumActiveDevicesPerUser: 20, registrationsPerUserPerMinute: 10))
        let set = try APIConfiguration.fromEnvironment(
            database.merging(["MAX_ACTIVE_DEVICES_PER_USER": "5", "REGISTRATIONS_PER_USER_PER_MINUTE": "120"]) { $1 })
        #expect(set.registrationLimits == RegistrationLimits(maximumActiveDevicesPerUser: 5, registrationsPerUserPerMinute: 120))
        #expect(throws: ConfigurationError.invalid("MAX_ACTIVE_DEVICES_PER_USER", "'0' is not an integer in 1...10000")) {
            try APIConfiguration.fromEnvironment(database.merging(["MAX_ACTIVE_DEVICES_PER_USER": "0"]) { $1 })
        }
        #expect(throws: ConfigurationError.invalid("REGISTRATIONS_PER_USER_PER_MINUTE", "'lots' is not an integer in 1...60000")) {
            try APIConfiguration.fromEnvironment(database.merging(["REGISTRATIONS_PER_USER_PER_MINUTE": "lots"]) { $1 })
        }
    }
}

extension TestClientProtocol {
    /// The caller's devices, as `GET /push/devices` lists them.
    func devices(_ bearer: String) async throws -> [[String: Any]] {
        let response = try await send(.get, "/push/devices", token: bearer)
        #expect(response.status == .ok)
        return try #require(response.json["devices"] as? [[String: Any]])
    }
}
