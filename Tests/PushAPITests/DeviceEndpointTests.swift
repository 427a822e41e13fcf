import Foundation
import Hummingbird
import HummingbirdTesting
import PushAPI
import TestSupport
import Testing
import WireFormats

@Suite("Device endpoints")
struct DeviceEndpointTests {
    @Test func registerCreatesThenRefreshesWithTheSameAnswer() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test { client in
            let first = try await client.register(
                token: "fcm-abcdefghijklmnopqrstuvwxyz-0123456789", as: fixture.token(), deviceID: "iphone-1")
            #expect(first.status == .created)
            let body = first.json
            #expect(body["token"] as? String == "fcm-abcdefghijklmnopqrstuvwxyz-0123456789")
            #expect(body["platform"] as? String == "ios")
            #expect(body["deviceId"] as? String == "iphone-1")
            #expect(body["isActive"] as? Bool == true)
            #expect(body["tokenType"] as? String == "fcm")
            let createdAt = try #require(body["createdAt"] as? String)
            #expect(createdAt.hasSuffix("Z"))
            #expect((try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(createdAt)) != nil)

            let second = try await client.register(
                token: "fcm-abcdefghijklmnopqrstuvwxyz-0123456789", as: fixture.token(), deviceID: "iphone-1")
            #expect(second.status == .ok)
            #expect(second.json["id"] as? Int == body["id"] as? Int)
            #expect(second.json["createdAt"] as? String == createdAt)
            #expect(second.headers[.contentType]?.hasPrefix("application/json") == true)
        }
    }

    @Test func listShowsOnlyTheCallersDevicesInTheCallersApp() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test { client in
            _ = try await client.register(token: "mine-1", as: fixture.token(user: 1))
            _ = try await client.register(token: "mine-2", as: fixture.token(user: 1), platform: "android")
            _ = try await client.register(token: "theirs", as: fixture.token(user: 2))
            let list = try await client.send(.get, "/push/devices", token: fixture.token(user: 1))
            #expect(list.status == .ok)
            let devices = try #require(list.json["devices"] as? [[String: Any]])
            #expect(Set(devices.compactMap { $0["token"] as? String }) == ["mine-1", "mine-2"])
        }
    }

    @Test func logoutDeactivatesIdempotentlyAndOnlyForTheOwner() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test { client in
            let created = try await client.register(token: "logout-me", as: fixture.token(user: 1))
            let id = try #require(created.json["id"] as? Int)

            let stranger = try await client.send(.delete, "/push/devices/\(id)", token: fixture.token(user: 2))
            let missing = try await client.send(.delete, "/push/devices/987654", token: fixture.token(user: 2))
            // Another user's device is indistinguishable from a missing one.
            #expect(stranger.status == .notFound && missing.status == .notFound)
            #expect(stranger.json["code"] as? String == "NOT_FOUND")
            #expect(stranger.json["message"] as? String == "device \(id) not found")

            #expect(try await client.send(.delete, "/push/devices/\(id)", token: fixture.token(user: 1)).status == .noContent)
            #expect(try await client.send(.delete, "/push/devices/\(id)", token: fixture.token(user: 1)).status == .noContent)
            let list = try await client.send(.get, "/push/devices", token: fixture.token(user: 1))
            let device = try #require((list.json["devices"] as? [[String: Any]])?.first)
            #expect(device["isActive"] as? Bool == false)
            #expect(device["deactivationReason"] as? String == "logout")
        }
    }

    @Test func accountSwitchOnOnePhoneLeavesTheOldAccountWithNothing() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test { client in
            _ = try await client.register(token: "phone-token", as: fixture.token(user: 1), deviceID: "phone")
            _ = try await client.register(token: "phone-token", as: fixture.token(user: 2), deviceID: "phone")
            let old = try await client.send(.get, "/push/devices", token: fixture.token(user: 1))
            let devices = try #require(old.json["devices"] as? [[String: Any]])
            #expect(devices.count == 1)
            let device = try #require(devices.first)
            #expect(device["isActive"] as? Bool == false)
            #expect(device["deactivationReason"] as? String == "account_switch")
        }
    }

    @Test func fidTokensAreAccepted() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test { client in
            let response = try await client.send(
                .post, "/push/devices", token: fixture.token(),
                json: #"{"token":"fid-cXk9","platform":"web","tokenType":"fid"}"#)
            #expect(response.status == .created)
            #expect(response.json["tokenType"] as? String == "fid")
        }
    }

    /// Many parallel requests over real HTTP: accounts racing for one token, each user
    /// re-registering: never a 5xx, never two active owners.
    @Test func parallelRequestsNeverLeaveTwoActiveOwners() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test(.live) { client in
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for i in 0..<120 {
                    group.addTask {
                        let user = Int64(i % 12 + 1)
                        let token = "contested-\(i % 3)"
                        if i % 7 == 0 {
                            return Int(try await client.send(.get, "/push/devices", token: fixture.token(user: user)).status.code)
                        }
                        return Int(
                            try await client.register(token: token, as: fixture.token(user: user), deviceID: "dev-\(i % 4)").status.code)
                    }
                }
                return try await group.reduce(into: [Int]()) { $0.append($1) }
            }
            #expect(statuses.allSatisfy { [200, 201].contains($0) })
        }
        let duplicates = try await fixture.database.withClient { client in
            var result = 0
            for try await n in try await client.query(
                "SELECT count(*)::int FROM (SELECT token FROM push_devices WHERE is_active GROUP BY token HAVING count(*) > 1) t"
            ).decode(Int.self) { result = n }
            return result
        }
        #expect(duplicates == 0)
    }

    /// Concurrent registrations share database statements (two connections, so most of them
    /// queue); each caller still gets its own device, and /metrics counts every registration.
    @Test func concurrentRegistrationsEachGetTheirOwnAnswer() async throws {
        let fixture = try await APIFixture.make()
        var configuration = fixture.configuration()
        configuration.databaseURL = fixture.database.url(poolMax: 2)
        let app = try await buildApplication(configuration, logger: apiLogger)
        try await app.test(.live) { client in
            let answers = try await withThrowingTaskGroup(of: (Int64, Int, String?, Int?).self) { group in
                for user in Int64(1)...60 {
                    group.addTask {
                        let response = try await client.register(
                            token: "tok-of-\(user)", as: fixture.token(user: user), deviceID: "phone-\(user)")
                        return (user, Int(response.status.code), response.json["token"] as? String, response.json["id"] as? Int)
                    }
                }
                return try await group.reduce(into: [(Int64, Int, String?, Int?)]()) { $0.append($1) }
            }
            #expect(answers.count == 60)
            for (user, status, token, _) in answers {
                #expect(status == 201 && token == "tok-of-\(user)")
            }
            #expect(Set(answers.compactMap(\.3)).count == 60)
            for user: Int64 in [1, 30, 60] {
                let list = try await client.send(.get, "/push/devices", token: fixture.token(user: user)).json
                let devices = try #require(list["devices"] as? [[String: Any]])
                #expect(devices.map { $0["token"] as? String } == ["tok-of-\(user)"])
            }
            let metrics = try await client.execute(uri: "/metrics", method: .get).text
            #expect(metrics.contains("registration_batch_size_sum 60"))
        }
    }
    /// Logs hold a device token's first 20 characters at most, never a JWT, at every level,
    /// even when a client puts the token where an id belongs.
    @Test func logsNeverHoldAWholeTokenOrTheJWT() async throws {
        let fixture = try await APIFixture.make()
        let log = CapturedLog()
        let token = "fcm-" + String(repeating: "Zq9", count: 50)
        let jwt = fixture.token(user: 5)
        let statuses = try await fixture.test(logger: log.logger(level: .trace)) { client in
            [
                try await client.register(token: token, as: jwt, deviceID: "phone-5").status.code,
                try await client.send(.delete, "/push/devices/\(token)", token: jwt).status.code,
                try await client.send(.get, "/push/devices/\(token)?x=\(token)", token: jwt).status.code,
                try await client.register(token: token, as: jwt, deviceID: "bad\u{2028}id").status.code,
            ]
        }
        #expect(statuses == [201, 400, 404, 400])
        let text = log.text
        #expect(text.contains(String(token.prefix(20))), "the request lines name the token's start")
        #expect(!text.contains(String(token.prefix(21))), "\(text)")
        #expect(!text.contains(jwt))
    }
}
