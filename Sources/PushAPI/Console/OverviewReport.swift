import DeviceRegistry
import Foundation
import Logging
import PostgresNIO

/// One app's line of the overview.
struct AppActivity: Sendable {
    let app: App
    var activeDevices = 0
    var inactiveDevices = 0
    var runningJobs = 0
    var queuedJobs = 0
    /// Deliveries waiting to be sent: pending retries, devices in flight, due audiences not expanded yet
    /// (what push-worker's push_queue_pending_deliveries counts, per app).
    var queueDepth = 0
    /// The unfinished job due longest ago.
    var oldestDue: (jobID: Int64, sendAt: Date)?
    /// `[0]` is the hour ending now.
    var hourlySends = [SendCounts](repeating: SendCounts(), count: 24)
}

/// The overview's figures, each read through an index, so that the page costs the same with a
/// million deliveries as with ten: device counts from the per-app device indexes, unfinished
/// jobs from the two partial indexes of unfinished jobs, the last day's deliveries as a range of
/// the primary key.
struct OverviewReport: Sendable {
    let client: PostgresClient
    let logger: Logger

    func activity(now: Date = Date()) async throws -> [AppActivity] {
        var activity = try await AppDirectory(client: client, logger: logger).list().map { AppActivity(app: $0) }
        let index = Dictionary(uniqueKeysWithValues: activity.enumerated().map { ($1.app.id, $0) })
        for row in try await DatabaseStatement.run(Self.devicesStatement, on: client, logger: logger) {
            let (app, active, total) = try row.decode((Int64, Int, Int).self)
            guard let position = index[app] else { continue }
            activity[position].activeDevices = active
            activity[position].inactiveDevices = total - active
        }
        for row in try await DatabaseStatement.run(Self.jobsStatement, on: client, logger: logger) {
            let (app, running, queued, depth, oldestJob, oldestSendAt) = try row.decode((Int64, Int, Int, Int, Int64?, Date?).self)
            guard let position = index[app] else { continue }
            activity[position].runningJobs = running
            activity[position].queuedJobs = queued
            activity[position].queueDepth = depth
            if let oldestJob, let oldestSendAt { activity[position].oldestDue = (oldestJob, oldestSendAt) }
        }
        if let first = try await firstDelivery(createdSince: now.addingTimeInterval(-24 * 3600)) {
            for row in try await DatabaseStatement.run(Self.sendsStatement(from: first, now: now), on: client, logger: logger) {
                let (app, hoursAgo, status, count) = try row.decode((Int64, Int, DeliveryStatus, Int).self)
                guard let position = index[app], (0..<24).contains(hoursAgo) else { continue }
                activity[position].hourlySends[hoursAgo].add(status, count)
            }
        }
        return activity
    }

    /// Active devices from the index of active devices by app, all of them from the index by
    /// (app, user): both are read without the table.
    static let devicesStatement: PostgresQuery = """
        SELECT a.id,
               (SELECT count(*) FROM push_devices d WHERE d.app_id = a.id AND d.is_active)::int,
               (SELECT count(*) FROM push_devices d WHERE d.app_id = a.id)::int
          FROM apps a
        """

    /// Unfinished jobs are those the two partial indexes hold: queued or running with audience
    /// left to expand (push_jobs_expandable; a queued job always has), and running with its
    /// audience expanded (push_jobs_running). A job's pending part is counted as JobSummary
    /// counts it; an audience not due yet is not waiting, as in the worker's metric.
    static let jobsStatement: PostgresQuery = """
        WITH unfinished AS (
            SELECT id, app_id, status, send_at, audience_complete, user_ids, platforms, audience_cursor, created_at FROM push_jobs
             WHERE status IN ('queued', 'running') AND NOT audience_complete
            UNION ALL
            SELECT id, app_id, status, send_at, audience_complete, user_ids, platforms, audience_cursor, created_at FROM push_jobs
             WHERE status = 'running' AND audience_complete)
        SELECT u.app_id,
               count(*) FILTER (WHERE u.status = 'running')::int,
               count(*) FILTER (WHERE u.status = 'queued')::int,
               COALESCE(sum(CASE WHEN u.send_at <= now()
                                 THEN push_job_unexpanded(u.status, u.audience_complete, u.app_id, u.user_ids, u.platforms,
                                                          u.audience_cursor)
                                 ELSE 0 END
                            + push_job_in_flight(u.id)
                            + (SELECT count(*) FROM push_deliveries p
                                WHERE p.job_id = u.id AND p.job_created_at = u.created_at AND p.status = 'pending')), 0)::int,
               (array_agg(u.id ORDER BY u.send_at, u.id) FILTER (WHERE u.send_at <= now()))[1],
               min(u.send_at) FILTER (WHERE u.send_at <= now())
          FROM unfinished u
         GROUP BY u.app_id
        """

    /// The last day's deliveries by app, hour (0: the last hour) and status: a range scan of the
    /// primary key from `first`, the id where that day begins.
    static func sendsStatement(from first: Int64, now: Date) -> PostgresQuery {
        """
        SELECT j.app_id, floor(extract(epoch FROM \(now)::timestamptz - d.created_at) / 3600)::int, d.status, count(*)::int
          FROM push_deliveries d JOIN push_jobs j ON j.id = d.job_id
         WHERE d.id >= \(first) AND d.created_at >= \(now)::timestamptz - interval '24 hours'
         GROUP BY 1, 2, 3
        """
    }

    /// The lowest delivery id created at or after `since`, found by bisecting the primary key:
    /// rows are inserted with their first outcome, so ids grow with `created_at` (up to the length
    /// of a transaction, which the statement's own `created_at` filter makes up for). About 40
    /// single-row reads of the index instead of reading every delivery's time.
    func firstDelivery(createdSince since: Date) async throws -> Int64? {
        let bounds = try await DatabaseStatement.run("SELECT min(id), max(id) FROM push_deliveries", on: client, logger: logger)
        guard case (let lowest?, let highest?)? = try bounds.first?.decode((Int64?, Int64?).self) else { return nil }
        var (low, high) = (lowest, highest)
        guard let newest = try await firstRow(atOrAbove: high), newest.createdAt >= since else { return nil }
        while low < high {
            let middle = low + (high - low) / 2
            guard let row = try await firstRow(atOrAbove: middle) else { break }
            if row.createdAt >= since {
                high = middle
            } else {
                // min: ids that do not grow with created_at must not carry the search past the day's start.
                low = min(row.id + 1, high)
            }
        }
        return low
    }

    private func firstRow(atOrAbove id: Int64) async throws -> (id: Int64, createdAt: Date)? {
        let rows = try await DatabaseStatement.run(
            "SELECT id, created_at FROM push_deliveries WHERE id >= \(id) ORDER BY id LIMIT 1", on: client, logger: logger)
        guard let (found, createdAt) = try rows.first?.decode((Int64, Date).self) else { return nil }
        return (found, createdAt)
    }
}
