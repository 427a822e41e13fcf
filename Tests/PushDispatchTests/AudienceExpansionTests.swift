import DeviceRegistry
import Foundation
import Logging
import PostgresNIO
import TestSupport
import Testing

@testable import PushDispatch

/// Audiences are expanded as they are sent: the next devices become chunks leased to the worker
/// that sends them, each device's row is written once with its result, and the parts not expanded
/// or in flight still count as pending.
@Suite("Expanding audiences into leased chunks")
struct AudienceExpansionTests {
    @Test func workersExpandingOneJobAtOnceShareItsAudienceWithoutOverlap() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        try await database.withClient { client in
            let (app, job) = try await Self.campaign(client, devices: 300, inactive: [7, 150])
            let summary = { try #require(try await JobDirectory(client: client, logger: workerLogger).job(job)) }
            var before = try await summary()
            #expect((before.audience, before.pending, before.sent) == (298, 298, 0))

            let audience = try #require(
                try await Self.queue(client, "a").unexpandedJobs(excludingApps: [], excludingJobs: [], limit: 10).first)
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
            // Each device is in a chunk leased to the worker that got it, for the lease's length;
            // no delivery row exists before a result.
            for (worker, mine) in claims where !mine.isEmpty {
                let leased = try await count(
                    client,
                    """
                    SELECT count(*)::int FROM push_job_chunks c CROSS JOIN LATERAL unnest(c.device_ids) AS dev(id)
                     WHERE dev.id = ANY(\(mine.map(\.deviceID))) AND c.job_id = \(job) AND c.lease_owner = \(worker)
                       AND c.lease_until > now() + interval '20 seconds'
                    """)
                #expect(leased == mine.count, "worker \(worker)")
            }
            #expect(try await count(client, "SELECT max(cardinality(device_ids))::int FROM push_job_chunks") == DeliveryQueue.chunkSize)
            #expect(try await count(client, "SELECT count(*)::int FROM push_deliveries") == 0)
            #expect(
                try await count(
                    client, "SELECT count(*)::int FROM push_jobs WHERE id = \(job) AND status = 'running' AND audience_complete") == 1)
            #expect(try await Self.queue(client, "a").unexpandedJobs(excludingApps: [], excludingJobs: [], limit: 10).isEmpty)
            // Leased chunks are in flight: nobody takes them over before the lease runs out.
            #expect(try await Self.queue(client, "d").claim(limit: 500, excludingApps: []).isEmpty)
            let takeover = try await Self.queue(client, "d").takeOverChunks(room: 500, excludingApps: [])
            #expect(takeover.claimed.isEmpty && takeover.empty.isEmpty)
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
            _ = try await queue.write(.init(results: DeliveryQueue.Result.sent(first.claimed.prefix(10))))
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

    /// A crashed worker's chunk is taken over when its lease runs out: the next worker gets the
    /// devices without a row yet (an inactive one to skip), and a result the first worker writes
    /// late neither duplicates a row nor deletes the chunk it no longer holds.
    @Test func expiredChunksAreTakenOverForTheDevicesWithoutARow() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        try await database.withClient { client in
            let (_, job) = try await Self.campaign(client, devices: 100, inactive: [])
            let crashed = Self.queue(client, "crashed")
            let next = Self.queue(client, "next")
            let expanded = try await crashed.expandOldestJob(limit: 101)
            #expect(expanded.claimed.count == 100 && expanded.complete)
            let chunks = Set(expanded.claimed.map(\.lease))
            #expect(chunks.count == 2)
            _ = try await crashed.write(.init(results: DeliveryQueue.Result.sent(expanded.claimed.prefix(10))))
            try await client.query("UPDATE push_job_chunks SET lease_until = now() - interval '1 second'")
            try await client.query(
                """
                UPDATE push_devices SET is_active = false, deactivated_at = now(), deactivation_reason = 'logout'
                 WHERE id = \(expanded.claimed[50].deviceID)
                """)

            // Less room than a chunk still takes one chunk, the oldest (the caller holds back what
            // does not fit); room for two takes the rest.
            let small = try await next.takeOverChunks(room: 40, excludingApps: [])
            #expect(small.claimed.count == 54 && Set(small.claimed.map(\.lease)).count == 1)
            let rest = try await next.takeOverChunks(room: 128, excludingApps: [])
            #expect(rest.claimed.count == 36)
            let taken = small.claimed + rest.claimed
            #expect(taken.count == 90 && rest.empty.isEmpty)
            #expect(Set(taken.map(\.deviceID)) == Set(expanded.claimed.dropFirst(10).map(\.deviceID)))
            #expect(taken.filter { !$0.deviceActive }.map(\.deviceID) == [expanded.claimed[50].deviceID])
            #expect(taken.allSatisfy { $0.jobRunning && $0.attempts == 0 })
            #expect(try await count(client, "SELECT count(*)::int FROM push_job_chunks WHERE lease_owner = 'next'") == 2)

            // The crashed worker comes back and writes what it had sent, and "finishes" its chunks.
            _ = try await crashed.write(
                .init(results: DeliveryQueue.Result.sent(expanded.claimed[10..<20]), finishedChunks: Array(chunks.compactMap(\.chunkID))))
            #expect(try await count(client, "SELECT count(*)::int FROM push_job_chunks") == 2)
            // Devices 10..<20 have their rows now: this write conflicts, and is written again keeping them.
            _ = try await next.write(.init(results: DeliveryQueue.Result.sent(taken), finishedChunks: Array(chunks.compactMap(\.chunkID))))
            #expect(try await count(client, "SELECT count(*)::int FROM push_job_chunks") == 0)
            #expect(try await count(client, "SELECT count(DISTINCT device_id)::int FROM push_deliveries WHERE job_id = \(job)") == 100)
            #expect(try await count(client, "SELECT count(*)::int FROM push_deliveries WHERE job_id = \(job)") == 100)
            try await next.completeFinished([job])
            let summary = try #require(try await JobDirectory(client: client, logger: workerLogger).job(job))
            #expect((summary.status, summary.audience, summary.sent, summary.pending) == (.completed, 100, 100, 0))
        }
    }

    /// The queue's statements bind the creation days of the jobs they touch (so that only those
    /// days' partitions are planned): a job made days ago, beside one made today, still has its
    /// due retries claimed, its expired chunks taken over, and is completed once all is sent.
    @Test func aJobMadeDaysAgoIsClaimedTakenOverAndCompletedBesideTodays() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        try await database.withClient { client in
            let (app, old) = try await Self.campaign(client, devices: 100, inactive: [])
            // Noon three days ago, its day's partition made from the job's own time (no midnight
            // passes between two readings of the clock).
            try await client.query(
                """
                UPDATE push_jobs SET created_at = (((now() AT TIME ZONE 'UTC')::date - 3) + time '12:00') AT TIME ZONE 'UTC'
                 WHERE id = \(old)
                """)
            try await client.query(
                "SELECT push_create_delivery_partition((created_at AT TIME ZONE 'UTC')::date) FROM push_jobs WHERE id = \(old)")
            let crashed = Self.queue(client, "crashed")
            let expanded = try await crashed.expandOldestJob(limit: 101)
            #expect(expanded.claimed.count == 100 && expanded.complete)
            // Today's job, running beside it.
            try await client.query(
                """
                INSERT INTO push_jobs (app_id, status, message, audience_complete, started_at)
                VALUES (\(app), 'running', '{}', true, now())
                """)
            // Ten were tried and are due again; the worker then crashed with the rest in flight.
            let retries = expanded.claimed.prefix(10).map {
                DeliveryQueue.Result(
                    $0, status: .pending, errorCode: .unavailable, errorMessage: nil, messageID: nil, attempted: true,
                    nextAttempt: Date())
            }
            _ = try await crashed.write(.init(results: retries))
            // In that day's partition.
            #expect(
                try await count(
                    client,
                    """
                    SELECT count(*)::int FROM push_deliveries d JOIN push_jobs j ON j.id = d.job_id
                     WHERE d.job_id = \(old) AND d.status = 'pending'
                       AND d.tableoid::regclass::text = 'push_deliveries_' || to_char(j.created_at AT TIME ZONE 'UTC', 'YYYYMMDD')
                    """) == 10)
            try await client.query("UPDATE push_job_chunks SET lease_until = now() - interval '1 second'")

            let next = Self.queue(client, "next")
            let due = try await next.claim(limit: 500, excludingApps: [])
            #expect(Set(due.map(\.deviceID)) == Set(expanded.claimed.prefix(10).map(\.deviceID)))
            let taken = try await next.takeOverChunks(room: 500, excludingApps: [])
            #expect(Set(taken.claimed.map(\.deviceID)) == Set(expanded.claimed.dropFirst(10).map(\.deviceID)))
            let chunks = Array(Set(taken.claimed.compactMap(\.lease.chunkID)))
            _ = try await next.write(.init(results: DeliveryQueue.Result.sent(due + taken.claimed), finishedChunks: chunks))
            try await next.completeFinished([old])
            let summary = try #require(try await JobDirectory(client: client, logger: workerLogger).job(old))
            #expect((summary.status, summary.audience, summary.sent, summary.pending) == (.completed, 100, 100, 0))
        }
    }

    /// Ending a job settles the chunks nobody holds any more, as it does pending rows; a chunk
    /// still leased is left to its worker. Taken over after the job ended, a chunk's devices are
    /// recorded as the ending says, not sent.
    @Test func endingAJobSettlesTheChunksNoWorkerHolds() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        try await database.withClient { client in
            let (_, job) = try await Self.campaign(client, devices: 100, inactive: [])
            let queue = Self.queue(client, "a")
            let expanded = try await queue.expandOldestJob(limit: 101)
            let expired = try #require(expanded.claimed.first?.lease.chunkID)
            try await client.query("UPDATE push_job_chunks SET lease_until = now() - interval '1 second' WHERE id = \(expired)")
            #expect(try await JobDirectory(client: client, logger: workerLogger).cancel(job) == .cancelled)
            #expect(
                try await count(
                    client,
                    """
                    SELECT count(*)::int FROM push_deliveries
                     WHERE job_id = \(job) AND status = 'skipped' AND error_code = 'CANCELLED'
                    """) == 64)
            var summary = try #require(try await JobDirectory(client: client, logger: workerLogger).job(job))
            #expect((summary.audience, summary.skipped, summary.pending) == (100, 64, 36))

            // The live chunk's worker crashed too: whoever takes it over records the ending.
            try await client.query("UPDATE push_job_chunks SET lease_until = now() - interval '1 second'")
            let taken = try await Self.queue(client, "b").takeOverChunks(room: 64, excludingApps: [])
            #expect(taken.claimed.count == 36 && taken.claimed.allSatisfy { !$0.jobRunning })
            let ended = taken.claimed.map {
                DeliveryQueue.Result(
                    $0, status: .pending, errorCode: .jobEnded, errorMessage: nil, messageID: nil, attempted: false,
                    nextAttempt: Date())
            }
            let chunk = try #require(taken.claimed.first?.lease.chunkID)
            _ = try await Self.queue(client, "b").write(.init(results: ended, finishedChunks: [chunk]))
            summary = try #require(try await JobDirectory(client: client, logger: workerLogger).job(job))
            #expect((summary.audience, summary.skipped, summary.pending) == (100, 100, 0))
        }
    }

    /// Devices are deactivated, never deleted, but an operator can DELETE one while it sits in a
    /// chunk. Its result then has no device to refer to: the write drops it and records the rest,
    /// the chunks end, and the job completes without it (before, the write was refused by the
    /// foreign key and retried for good, and the worker's results stopped).
    @Test func aDeviceDeletedInFlightGetsNoRowAndTheWriteGoesOn() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        try await database.withClient { client in
            let (_, job) = try await Self.campaign(client, devices: 100, inactive: [])
            let queue = Self.queue(client, "a")
            let expanded = try await queue.expandOldestJob(limit: 101)
            #expect(expanded.claimed.count == 100 && expanded.complete)
            let deleted = [expanded.claimed[3].deviceID, expanded.claimed[70].deviceID]
            try await client.query("DELETE FROM push_devices WHERE id = ANY(\(deleted))")

            let chunks = Array(Set(expanded.claimed.compactMap(\.lease.chunkID)))
            _ = try await queue.write(.init(results: DeliveryQueue.Result.sent(expanded.claimed), finishedChunks: chunks))
            #expect(try await count(client, "SELECT count(*)::int FROM push_job_chunks") == 0)
            #expect(try await count(client, "SELECT count(*)::int FROM push_deliveries WHERE job_id = \(job) AND status = 'sent'") == 98)
            #expect(try await count(client, "SELECT count(*)::int FROM push_deliveries WHERE device_id = ANY(\(deleted))") == 0)
            try await queue.completeFinished([job])
            let summary = try #require(try await JobDirectory(client: client, logger: workerLogger).job(job))
            #expect((summary.status, summary.audience, summary.sent, summary.pending) == (.completed, 98, 98, 0))
        }
    }

    /// Cancelling a job and expiring one settle the chunks no worker holds by giving each of
    /// their devices a row: a device deleted meanwhile gets none, and the ending goes through
    /// (before, the foreign key refused it; `push_expire_jobs` ends every due job in one call, so
    /// no job expired any more).
    @Test func endingsPassOverDevicesDeletedFromChunksNoWorkerHolds() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        try await database.withClient { client in
            let (_, cancelled) = try await Self.campaign(client, devices: 100, inactive: [])
            let jobs = JobDirectory(client: client, logger: workerLogger)
            let expiring = try await jobs.enqueue(
                appCode: "wowa", userIDs: nil, platforms: nil, message: #"{"notification":{"title":"t"}}"#, idempotencyKey: nil,
                sendAt: nil, dryRun: false
            ).id
            let queue = Self.queue(client, "crashed")
            for job in [cancelled, expiring] {
                let expanded = try await queue.expandOldestJob(limit: 101)
                #expect(expanded.claimed.count == 100 && expanded.claimed.allSatisfy { $0.jobID == job })
            }
            try await client.query("UPDATE push_job_chunks SET lease_until = now() - interval '1 second'")
            try await client.query("DELETE FROM push_devices WHERE token IN ('expand-5', 'expand-80')")

            #expect(try await jobs.cancel(cancelled) == .cancelled)
            var summary = try #require(try await jobs.job(cancelled))
            #expect((summary.status, summary.audience, summary.skipped, summary.pending) == (.cancelled, 98, 98, 0))

            try await client.query(
                """
                UPDATE push_jobs SET send_at = now() - interval '2 seconds', expires_at = now() - interval '1 second'
                 WHERE id = \(expiring)
                """)
            var ended: [Int64] = []
            for try await id in try await client.query("SELECT push_expire_jobs()").decode(Int64.self) { ended.append(id) }
            #expect(ended == [expiring])
            summary = try #require(try await jobs.job(expiring))
            #expect((summary.status, summary.audience, summary.expired, summary.pending) == (.completed, 98, 98, 0))
            #expect(try await count(client, "SELECT count(*)::int FROM push_job_chunks") == 0)
        }
    }

    /// An app with `devices` active devices (minus the `inactive` ones, by their number) and one
    /// campaign to them.
    private static func campaign(_ client: PostgresClient, devices: Int, inactive: [Int]) async throws -> (app: Int64, job: Int64) {
        let app = try await AppDirectory(client: client, logger: workerLogger).add(code: "wowa", name: "wowa", serviceAccount: nil).id
        try await client.query(
            """
            INSERT INTO push_devices (user_id, app_id, token, platform, is_active, deactivated_at, deactivation_reason)
            SELECT g, \(app), 'expand-' || g, 'android', NOT (g = ANY(\(inactive))),
                   CASE WHEN g = ANY(\(inactive)) THEN now() END, CASE WHEN g = ANY(\(inactive)) THEN 'logout' END
              FROM generate_series(1, \(devices)) g
            """)
        let job = try await JobDirectory(client: client, logger: workerLogger).enqueue(
            appCode: "wowa", userIDs: nil, platforms: nil, message: #"{"notification":{"title":"t"}}"#, idempotencyKey: nil, sendAt: nil,
            dryRun: false
        ).id
        return (app, job)
    }

    private static func queue(_ client: PostgresClient, _ worker: String) -> DeliveryQueue {
        DeliveryQueue(client: client, worker: worker, lease: .seconds(30), logger: workerLogger)
    }
}
