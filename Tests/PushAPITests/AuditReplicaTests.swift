import DeviceRegistry
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import PostgresNIO
import PushAPI
import ServiceSupport
import TestSupport
import Testing

@Suite("Audit reads on a streaming standby", .timeLimit(.minutes(3)))
struct AuditReplicaTests {
    static let adminToken = "replica-tests-admin-token"

    /// With the standby's replay paused, a job queued through push-api (a write: the primary;
    /// the standby would refuse it) is absent from GET /admin/jobs, which reads the standby and
    /// says it is behind; GET /admin/jobs/{id} finds it on the primary. Once replay resumes, the
    /// listing shows it and the lag is 0.
    @Test func theAdminAuditReadsTheStandbyAndShowsItsLag() async throws {
        try await ReplicatedDatabase.with { database in
            let configuration = APIConfiguration(
                databaseURL: database.primaryURL, port: 0, jwt: .init(hmacSecret: TokenMint.secret), adminToken: Self.adminToken,
                readDatabaseURL: database.standbyURL)
            let app = try await buildApplication(configuration, logger: apiLogger)
            try await app.test(.router) { client in
                // Caught up, once the standby has replayed what the primary wrote meanwhile
                // (autovacuum, a standby snapshot): lag is 0 only when nothing is left to replay.
                let idle = try await poll { () -> TestResponse? in
                    let listing = try await client.send(.get, "/admin/jobs", token: Self.adminToken)
                    return listing.status == .ok && listing.json["replicaLagSeconds"] as? Double == 0 ? listing : nil
                }
                #expect(idle.status == .ok && idle.json["replicaLagSeconds"] as? Double == 0, "caught up: \(idle.text)")

                try await database.pauseReplay()
                let queued = try await client.send(
                    .post, "/push/notifications", token: Self.adminToken,
                    json: #"{"appCode":"wowa","userIds":[1],"message":{"notification":{"title":"Replicated"}}}"#)
                #expect(queued.status == .accepted, "\(queued.text)")
                let job = try #require((queued.json["jobId"] as? NSNumber)?.int64Value)

                let behind = try await poll { () -> TestResponse? in
                    let listing = try await client.send(.get, "/admin/jobs", token: Self.adminToken)
                    return (listing.json["replicaLagSeconds"] as? Double ?? 0) > 0 ? listing : nil
                }
                #expect((behind.json["jobs"] as? [Any])?.isEmpty == true, "the standby has not applied the job: \(behind.text)")
                let deliveries = try await client.send(.get, "/admin/deliveries?jobId=\(job)", token: Self.adminToken)
                #expect((deliveries.json["replicaLagSeconds"] as? Double ?? 0) > 0, "\(deliveries.text)")
                let single = try await client.send(.get, "/admin/jobs/\(job)", token: Self.adminToken)
                #expect(single.status == .ok && (single.json["id"] as? NSNumber)?.int64Value == job, "\(single.text)")

                try await database.resumeReplay()
                let caughtUp = try await poll { () -> TestResponse? in
                    let listing = try await client.send(.get, "/admin/jobs", token: Self.adminToken)
                    return listing.json["replicaLagSeconds"] as? Double == 0 ? listing : nil
                }
                let ids = (caughtUp.json["jobs"] as? [[String: Any]])?.compactMap { ($0["id"] as? NSNumber)?.int64Value }
                #expect(ids == [job], "\(caughtUp.text)")
            }
        }
    }

    /// The console lists from the standby and says so on its overview, with the lag; a job
    /// composed a moment ago that the standby has not replayed opens from the primary.
    @Test func theConsoleReadsTheStandbyAndItsOverviewShowsTheLag() async throws {
        try await ReplicatedDatabase.with { database in
            let configuration = APIConfiguration(
                databaseURL: database.primaryURL, port: 0, jwt: .init(hmacSecret: TokenMint.secret),
                adminToken: ConsoleBrowser.adminToken, readDatabaseURL: database.standbyURL)
            let app = try await buildApplication(configuration, logger: apiLogger)
            try await app.test(.router) { client in
                var browser = ConsoleBrowser()
                _ = try await browser.signIn(client)
                // Within the poll's 20 s (it fails the test otherwise): the migrations' autovacuum
                // or a standby snapshot may be left to replay a moment.
                _ = try await poll { () -> String? in
                    let page = try await browser.get(client, "/console").text
                    return page.contains("These pages are read from the standby (DATABASE_READ_URL): no lag.") ? page : nil
                }

                try await database.pauseReplay()
                let queued = try await client.send(
                    .post, "/push/notifications", token: ConsoleBrowser.adminToken,
                    json: #"{"appCode":"wowa","userIds":[1],"message":{"notification":{"title":"Replicated"}}}"#)
                let job = try #require((queued.json["jobId"] as? NSNumber)?.int64Value)
                let overview = try await poll { () -> String? in
                    let page = try await browser.get(client, "/console").text
                    return page.contains(" s behind.") ? page : nil
                }
                #expect(overview.contains("read from the standby (DATABASE_READ_URL): "))
                let listing = try await browser.get(client, "/console/jobs").text
                #expect(!listing.contains("/console/jobs/\(job)\""), "the standby has not applied it")
                let page = try await browser.get(client, "/console/jobs/\(job)")
                #expect(page.status == .ok && page.text.contains("Replicated"), "\(page.text)")

                try await database.resumeReplay()
                _ = try await poll { () -> String? in
                    let listing = try await browser.get(client, "/console/jobs").text
                    return listing.contains("/console/jobs/\(job)\"") ? listing : nil
                }
            }
        }
    }

    /// Without DATABASE_READ_URL the listings are read from the primary and say nothing of a
    /// replica: the responses are what they were before the setting existed.
    @Test func withoutAReadURLTheListingsHaveNoLag() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test(adminToken: Self.adminToken) { client in
            for path in ["/admin/jobs", "/admin/deliveries"] {
                let listing = try await client.send(.get, path, token: Self.adminToken)
                #expect(listing.status == .ok)
                #expect(listing.json["replicaLagSeconds"] == nil, "\(path): \(listing.text)")
            }
        }
    }

    @Test func anUnusableReadURLIsNamedAtStart() {
        let environment = [
            "DATABASE_URL": "postgres://u@db/push", "JWT_SECRET": TokenMint.secret, "DATABASE_READ_URL": "mysql://u@standby/push",
        ]
        #expect(throws: ConfigurationError.invalid("DATABASE_READ_URL", "expected postgres://user:password@host:port/database")) {
            try APIConfiguration.fromEnvironment(environment)
        }
    }

    /// `body`'s answer once it has one, within 20 s.
    func poll<T>(_ body: () async throws -> T?) async throws -> T {
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            if let value = try await body() { return value }
            try await Task.sleep(for: .milliseconds(100))
        }
        Issue.record("no answer within 20 s")
        throw CancellationError()
    }
}
