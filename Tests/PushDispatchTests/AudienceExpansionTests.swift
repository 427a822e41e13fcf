import DeviceRegistry
import Foundation
import Logging
import PostgresNIO
@testable import PushDispatch
import Testing
import TestSupport

/// Audiences are expanded as they are sent: each chunk is inserted already leased to the worker
/// that sends it, and the part not expanded yet still counts as pending.
@Suite("Expanding audiences into leased deliveries")
struct AudienceExpansionTests {
    @Test func workersExpandingOneJobAtOnceShareItsAudienceWithoutOverlap() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        try await database.withClient { client in
            let (app, job) = try await Self.campaign(client, devices: 300, inactive: [7, 150])
            let summary = { try #require(try await JobDirectory(client: client, logger: workerLogger).job(job)) }
            var before = try await summary()
            #expect((before.audience, before.pending, before.sent) == (298, 298, 0))

            let audience = try #require(try await Self.queue(client, "a").unexpandedJobs(excludingApps: [], excludingJobs: [], limit: 10).first)
            #expect(audience.job == job && audience.app == app && audience.users == nil && audience.platforms == nil)
            // Three workers expand the same job concurrently, 64 at a time, until it is complete.
            let claims = try await withThrowingTaskGroup(of: (String, [DeliveryQueue.Claimed]).self) { group in
                for worker in ["a", "b", "c"] {
                    group.addTask {
                        let queue = Self.queue(client, worker)
                        var mine: [DeliveryQueue.Claimed] = []
                        while true {
                            let (claimed, complete) = try await queue.expandAndClaim(audience, limit: 64)
                            mine += claimed
                            if complete { return (worker, mine) }
                        }
                    }
                }
                return try await group.reduce(into: [:]) { $0[$1.0] = $1.1 }
            }
            let all = claims.values.flatMap { $0 }
            #expect(all.count == 298 && Set(all.map(\.deviceID)).count == 298)
            #expect(all.allSatisfy { $0.attempts == 0 && $0.deviceActive && $0.jobID == job && $0.token.hasPrefix("expand-") })
            // Each row is leased to the worker that got it, for the lease's length.
            for (worker, mine) in claims where !mine.isEmpty {
                let leased = try await count(client, """
                    SELECT count(*)::int FROM push_deliveries
                     WHERE id = ANY(\(mine.map(\.deliveryID))) AND status = 'pending' AND lease_owner = \(worker)
                       AND next_attempt_at > now() + interval '20 seconds'
                    """)
                #expect(leased == mine.count, "worker \(worker)")
            }
            #expect(try await count(client, "SELECT count(*)::int FROM push_jobs WHERE id = \(job) AND status = 'running' AND audience_complete") == 1)
            #expect(try await Self.queue(client, "a").unexpandedJobs(excludingApps: [], excludingJobs: [], limit: 10).isEmpty)
            // Leased rows are in flight: no claim takes them before the lease runs out.
            #expect(try await Self.queue(client, "d").claim(limit: 500, excludingApps: []).isEmpty)
            before = try await summary()
            #expect((before.audience, before.pending) == (298, 298))
        }
    }

    @Test func theSummaryCountsWhatIsNotExpandedYetAsPending() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        try await database.withClient { client in
            let (_, job) = try await Self.campaign(client, devices: 100, inactive: [])
            let queue = Self.queue(client, "a")
            let audience = try #require(try await queue.unexpandedJobs(excludingApps: [], excludingJobs: [], limit: 10).first)
            let first = try await queue.expandAndClaim(audience, limit: 30)
            #expect(first.claimed.count == 30 && !first.complete)
            let results = first.claimed.prefix(10).map {
                DeliveryQueue.Result(deliveryID: $0.deliveryID, status: "sent", errorCode: nil, errorMessage: nil, messageID: "m",
                                     attempted: true, nextAttempt: Date())
            }
            try await queue.record(Array(results), deactivate: [])
            let summary = try #require(try await JobDirectory(client: client, logger: workerLogger).job(job))
            #expect((summary.audience, summary.sent, summary.pending) == (100, 10, 90))
            // Paused apps and excluded jobs are not expanded.
            #expect(try await queue.unexpandedJobs(excludingApps: [audience.app], excludingJobs: [], limit: 10).isEmpty)
            #expect(try await queue.unexpandedJobs(excludingApps: [], excludingJobs: [job], limit: 10).isEmpty)
            // A cancelled job expands nothing more, and its unexpanded rest is no longer pending.
            #expect(try await JobDirectory(client: client, logger: workerLogger).cancel(job) == .cancelled)
            let after = try await queue.expandAndClaim(audience, limit: 30)
            #expect(after.claimed.isEmpty && after.complete)
            let cancelled = try #require(try await JobDirectory(client: client, logger: workerLogger).job(job))
            #expect((cancelled.audience, cancelled.sent, cancelled.pending) == (30, 10, 20))
        }
    }

    /// An app with `devices` active devices (minus the `inactive` ones, by their number) and one
    /// campaign to them.
    private static func campaign(_ client: PostgresClient, devices: Int, inactive: [Int]) async throws -> (app: Int64, job: Int64) {
        let app = try await AppDirectory(client: client, logger: workerLogger).add(code: "wowa", name: "wowa", serviceAccount: nil).id
        try await client.query("""
            INSERT INTO push_devices (user_id, app_id, token, platform, is_active, deactivated_at, deactivation_reason)
            SELECT g, \(app), 'expand-' || g, 'android', NOT (g = ANY(\(inactive))),
                   CASE WHEN g = ANY(\(inactive)) THEN now() END, CASE WHEN g = ANY(\(inactive)) THEN 'logout' END
              FROM generate_series(1, \(devices)) g
            """)
        let job = try await JobDirectory(client: client, logger: workerLogger).enqueue(
            appCode: "wowa", userIDs: nil, platforms: nil, message: #"{"notification":{"title":"t"}}"#, idempotencyKey: nil, sendAt: nil, dryRun: false)
        return (app, job)
    }

    private static func queue(_ client: PostgresClient, _ worker: String) -> DeliveryQueue {
        DeliveryQueue(client: client, worker: worker, lease: .seconds(30), logger: workerLogger)
    }
}
