import DeviceRegistry
import Foundation
import HummingbirdTesting
import Logging
import PushAPI
import TestSupport
import Testing

@Suite("Database outage")
struct OutageTests {
    /// The database goes away and comes back on the same port: 503 with the envelope and a
    /// failing /readyz meanwhile, then service resumes without a restart.
    @Test(.timeLimit(.minutes(2)))
    func answers503WhileTheDatabaseIsDownAndRecoversByItself() async throws {
        let port = try LocalCluster.freePort()
        let url = "postgres://postgres@127.0.0.1:\(port)/postgres?sslmode=disable"
        let configuration = APIConfiguration(
            databaseURL: url, port: 0, jwt: .init(hmacSecret: TokenMint.secret), databaseDeadline: .seconds(2))
        let app = try await buildApplication(configuration, logger: apiLogger)
        let token = TokenMint.sign(TokenMint.claims(appID: 1))
        try await app.test(.router) { client in
            let t0 = ContinuousClock.now
            let down = try await client.register(token: "outage-tok", as: token)
            #expect(ContinuousClock.now - t0 < .seconds(4))
            #expect(down.status == .serviceUnavailable)
            #expect(down.json["code"] as? String == "DATABASE_UNAVAILABLE")
            #expect(down.json["status"] as? String == "SERVICE_UNAVAILABLE")
            #expect(try await client.execute(uri: "/readyz", method: .get).status == .serviceUnavailable)
            #expect(try await client.execute(uri: "/healthz", method: .get).status == .ok)

            let cluster = try LocalCluster.start(port: port)
            defer { cluster.stop() }
            try await TestPostgres.withClient(url: url) { client in
                try await MigrationRunner.bundled().run(on: client, logger: apiLogger)
                _ = try await AppDirectory(client: client, logger: apiLogger).add(code: "wowa", name: "Wowa", serviceAccount: nil)
            }
            var recovered = false
            let start = ContinuousClock.now
            for _ in 0..<60 where !recovered {
                recovered = try await client.execute(uri: "/readyz", method: .get).status == .ok
                if !recovered { try await Task.sleep(for: .milliseconds(500)) }
            }
            #expect(recovered, "not ready \(ContinuousClock.now - start) after the database came back")
            #expect(try await client.register(token: "outage-tok", as: token).status == .created)

            // And down again mid-flight: still the envelope, never a hang or a 500.
            cluster.stop()
            let again = try await client.register(token: "outage-tok", as: token)
            #expect(again.status == .serviceUnavailable)
        }
    }
}
