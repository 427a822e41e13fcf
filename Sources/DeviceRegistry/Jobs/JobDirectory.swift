import Foundation
import Logging
import PostgresNIO

/// A job as operators see it: the same rows the worker writes, counted, no second bookkeeping.
/// Encoded as the HTTP API shows it.
public struct JobSummary: Sendable, Equatable, Encodable {
    public let id: Int64
    public let appCode: String
    public let kind: JobKind
    /// The message's `notification.title`; nil when it has none (a data-only message).
    public let title: String?
    public let status: JobStatus
    public let sendAt: Date
    public let createdAt: Date
    public let finishedAt: Date?
    /// nil: the job ended (cancelled, failed) before any of its audience was expanded, so how
    /// many devices it would have reached was never counted. Not 0, which is an audience counted empty.
    public let audience: Int?
    public let sent: Int
    public let failed: Int
    public let skipped: Int
    public let pending: Int
    /// FCM `validate_only`: every message checked by FCM, nothing delivered.
    public let dryRun: Bool
    /// The job's own error (why it failed as a whole), else the first failed delivery's.
    public let firstError: String?
    /// Our scheduling priority, not FCM's android.priority or apns-priority.
    public let priority: JobPriority
    /// Deliveries not sent by then are skipped (EXPIRED); nil: the job never expires.
    public let expiresAt: Date?
    /// Skipped deliveries that expired (error_code EXPIRED), counted in `skipped` too.
    public let expired: Int

    enum CodingKeys: String, CodingKey {
        case id, appCode, kind, title, status, sendAt, createdAt, finishedAt, audience, sent, failed, skipped, pending, dryRun, firstError
        case priority, expiresAt, expired
    }

    /// Absent optionals are left out, as elsewhere, except `audience`: always there, null when not counted.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(appCode, forKey: .appCode)
        try container.encode(kind, forKey: .kind)
        try container.encodeIfPresent(title, forKey: .title)
        try container.encode(status, forKey: .status)
        try container.encode(sendAt, forKey: .sendAt)
        try container.encode(createdAt, forKey: .createdAt)
        try container.encodeIfPresent(finishedAt, forKey: .finishedAt)
        try container.encode(audience, forKey: .audience)
        try container.encode(sent, forKey: .sent)
        try container.encode(failed, forKey: .failed)
        try container.encode(skipped, forKey: .skipped)
        try container.encode(pending, forKey: .pending)
        try container.encode(dryRun, forKey: .dryRun)
        try container.encodeIfPresent(firstError, forKey: .firstError)
        try container.encode(priority, forKey: .priority)
        try container.encodeIfPresent(expiresAt, forKey: .expiresAt)
        try container.encode(expired, forKey: .expired)
    }
}

/// Who a job is for, as `push_jobs.user_ids` says: named users, or (NULL) the whole app.
public enum JobKind: String, Sendable, Encodable, CaseIterable {
    /// To named users' devices (push_enqueue, pushctl send).
    case single
    /// To every active device of the app (push_enqueue_campaign, pushctl campaign).
    case campaign
}

/// Why the enqueue functions refused a job (SQLSTATE 22023): the message names the field.
public struct EnqueueRejected: Error, CustomStringConvertible, Equatable {
    /// What the refusal is about, for callers that name the field in their own terms (the SQL
    /// functions name their parameters: `app_code`, `expires_at`).
    public enum Parameter: Sendable, Equatable {
        case appCode
        /// `expiresAt` or `ttl`, whichever was given.
        case expiry
    }

    public let description: String
    public let parameter: Parameter?

    public init(description: String, parameter: Parameter? = nil) {
        self.description = description
        self.parameter = parameter
    }
}

/// Which jobs a listing shows; every field narrows, nil means any.
public struct JobFilter: Sendable, Equatable {
    public var appCode: String?
    public var status: JobStatus?
    public var kind: JobKind?
    public var priority: JobPriority?

    public init(appCode: String? = nil, status: JobStatus? = nil, kind: JobKind? = nil, priority: JobPriority? = nil) {
        self.appCode = appCode
        self.status = status
        self.kind = kind
        self.priority = priority
    }
}

/// What a job sends and to whom, as `push_jobs` holds it.
public struct JobContent: Sendable, Equatable {
    /// The message as PostgreSQL's jsonb_pretty prints it.
    public let message: String
    /// How many users it is for; nil: a campaign.
    public let userCount: Int?
    /// A campaign's platforms; nil: all of them.
    public let platforms: [Platform]?
    public let idempotencyKey: String?
}

/// How many of a job's deliveries ended one way (status and FCM's or our error code).
public struct JobOutcome: Sendable, Equatable {
    public let status: DeliveryStatus
    public let errorCode: String?
    public let count: Int
}

/// A job `JobDirectory.enqueue` queued, or found queued before under the same idempotency key.
public struct EnqueuedJob: Sendable, Equatable {
    public let id: Int64
    /// The idempotency key had queued this job before: nothing new was queued, whatever the
    /// message said this time.
    public let queuedBefore: Bool

    public init(id: Int64, queuedBefore: Bool) {
        self.id = id
        self.queuedBefore = queuedBefore
    }
}

/// Enqueueing, listing, cancelling jobs, and pruning idle devices: what pushctl (and cron) do.
public struct JobDirectory: Sendable {
    let client: PostgresClient
    let logger: Logger

    public init(client: PostgresClient, logger: Logger) {
        self.client = client
        self.logger = logger
    }

    /// Queues a notification to users, or a campaign to the whole app when `userIDs` is nil,
    /// through the same SQL functions backend teams call. Returns the job (the existing one,
    /// said so, when the idempotency key was used before). `priority` nil is the function's default (high
    /// for users, bulk for a campaign); `expiresAt` or `ttl` (from `sendAt`), not both, makes what
    /// is not sent by then skipped (EXPIRED). Refusals are ``EnqueueRejected``. With
    /// `giveUpAt` the server gives the enqueue up (and commits nothing) at that moment, however
    /// long the wait for a connection took: a caller answered "unavailable" then must not find
    /// the job queued when it retries.
    public func enqueue(
        appCode: String, userIDs: [Int64]?, platforms: [String]?, message: String,
        idempotencyKey: String?, sendAt: Date?, dryRun: Bool,
        priority: JobPriority? = nil, expiresAt: Date? = nil, ttl: Duration? = nil, giveUpAt: ContinuousClock.Instant? = nil
    ) async throws -> EnqueuedJob {
        if let ttl, (sendAt ?? Date()).addingTimeInterval(ttl.inSeconds) > Self.latestExpiry {
            throw EnqueueRejected(
                description: "ttl from send_at ends after 9999-12-31, the last day a time is written for", parameter: .expiry)
        }
        var sql = PostgresQuery.StringInterpolation(literalCapacity: 400, interpolationCount: 10)
        if let userIDs {
            sql.appendLiteral("SELECT push_enqueue(app_code => ")
            sql.appendInterpolation(appCode)
            sql.appendLiteral(", user_ids => ")
            sql.appendInterpolation(userIDs)
        } else {
            sql.appendLiteral("SELECT push_enqueue_campaign(app_code => ")
            sql.appendInterpolation(appCode)
            sql.appendLiteral(", platforms => ")
            sql.appendInterpolation(platforms)
        }
        sql.appendLiteral(", message => ")
        sql.appendInterpolation(message)
        sql.appendLiteral("::jsonb, idempotency_key => ")
        sql.appendInterpolation(idempotencyKey)
        sql.appendLiteral(", send_at => ")
        sql.appendInterpolation(sendAt)
        sql.appendLiteral(", dry_run => ")
        sql.appendInterpolation(dryRun)
        sql.appendLiteral(", expires_at => ")
        sql.appendInterpolation(expiresAt)
        sql.appendLiteral(", ttl => ")
        sql.appendInterpolation(ttl?.inSeconds)
        sql.appendLiteral("::float8 * interval '1 second'")
        // Named only when given: the functions' defaults stay the one place that says them.
        if let priority {
            sql.appendLiteral(", priority => ")
            sql.appendInterpolation(priority.rawValue)
        }
        sql.appendLiteral(")")
        let query = PostgresQuery(stringInterpolation: sql)
        do {
            // The functions' RAISE arrives with the rows, not with the query's start: read inside the do.
            return try await DatabaseTransaction.run(client, logger: logger) { transaction in
                if let giveUpAt {
                    let milliseconds = String(max(1, Int(((giveUpAt - .now).inSeconds * 1000).rounded(.up))))
                    try await transaction.query("SELECT set_config('statement_timeout', \(milliseconds), true)")
                }
                guard let id = try await transaction.query(query).first?.decode(Int64.self) else {
                    preconditionFailure("the enqueue functions return one row")
                }
                guard idempotencyKey != nil else { return EnqueuedJob(id: id, queuedBefore: false) }
                // A job this transaction inserted carries its transaction id; one the key had
                // queued, an earlier one's (a replay only reads, so it may have no id of its own).
                let before = try await transaction.query(
                    "SELECT (xmin = pg_current_xact_id_if_assigned()::xid) IS NOT TRUE FROM push_jobs WHERE id = \(id)")
                return EnqueuedJob(id: id, queuedBefore: try before.first?.decode(Bool.self) ?? false)
            }
        } catch  where DatabaseErrorText.sqlState(error)?.isInClass(of: .dataException) == true {
            // Data exceptions: the functions' own refusals (22023), a message that is not JSON
            // (22P02), a NUL character PostgreSQL text cannot hold (22021, 22P05), a lifetime
            // out of PostgreSQL's range (22008).
            let text = DatabaseErrorText.describe(error)
            let parameter: EnqueueRejected.Parameter? =
                if text.hasPrefix("unknown app code") {
                    .appCode
                } else if (expiresAt != nil || ttl != nil) && ["expires_at", "ttl", "out of range"].contains(where: text.contains) {
                    .expiry
                } else {
                    nil
                }
            throw EnqueueRejected(description: text, parameter: parameter)
        }
    }

    /// The longest `ttl` the API, the console and pushctl take: ten years, far past FCM's own
    /// 28 days, and short of dates no one can write.
    public static let longestTTL = Duration.seconds(315_360_000)

    /// 9999-12-31T23:59:59.999Z: times are read and written with four-digit years, so a job
    /// whose ttl ends later would show an expiry no caller could give back.
    static let latestExpiry = Date(timeIntervalSince1970: 253_402_300_799.999)

    /// How many jobs one listing may ask for (GET /admin/jobs, pushctl jobs).
    public static let listLimits: ClosedRange<Int64> = 1...1000

    public func list(status: JobStatus?, limit: Int) async throws -> [JobSummary] {
        try await list(JobFilter(status: status), limit: limit)
    }

    /// Jobs newest first, by keyset: those below `cursor` (a job id) when given. The filters are
    /// checked on the primary key's walk down from the cursor.
    public func list(_ filter: JobFilter, below cursor: Int64? = nil, limit: Int) async throws -> [JobSummary] {
        let campaign = filter.kind.map { $0 == .campaign }
        return try await summaries(
            DatabaseStatement.run(
                """
                \(unescaped: Self.select)
                 WHERE j.id IN (
                       -- The page's jobs first: counting deliveries for every job before the LIMIT
                       -- read the whole delivery log (1.2 s over a million rows).
                       SELECT p.id FROM push_jobs p JOIN apps pa ON pa.id = p.app_id
                        WHERE (\(filter.status)::text IS NULL OR p.status = \(filter.status))
                          AND (\(filter.appCode)::text IS NULL OR pa.code = \(filter.appCode))
                          AND (\(campaign)::boolean IS NULL OR (p.user_ids IS NULL) = \(campaign))
                          AND (\(filter.priority)::text IS NULL OR p.priority = \(filter.priority))
                          AND (\(cursor)::bigint IS NULL OR p.id < \(cursor))
                        ORDER BY p.id DESC LIMIT \(limit))
                 ORDER BY j.id DESC
                """,
                on: client, logger: logger))
    }

    public func job(_ id: Int64) async throws -> JobSummary? {
        try await summaries(DatabaseStatement.run("\(unescaped: Self.select) WHERE j.id = \(id)", on: client, logger: logger)).first
    }

    /// What a job sends and to whom, as stored; nil for an unknown id.
    public func content(_ id: Int64) async throws -> JobContent? {
        let rows = try await DatabaseStatement.run(
            "SELECT jsonb_pretty(message), cardinality(user_ids), platforms, idempotency_key FROM push_jobs WHERE id = \(id)",
            on: client, logger: logger)
        if let row = rows.first {
            let (message, users, platforms, key) = try row.decode((String, Int?, [String]?, String?).self)
            return JobContent(
                message: message, userCount: users, platforms: platforms?.compactMap(Platform.init(rawValue:)),
                idempotencyKey: key)
        }
        return nil
    }

    /// A job's deliveries counted by status and error code, the largest group first.
    public func outcomes(_ id: Int64) async throws -> [JobOutcome] {
        let rows = try await DatabaseStatement.run(
            """
            SELECT status, error_code, count(*)::int FROM push_deliveries
             WHERE job_id = \(id) AND job_created_at = (SELECT created_at FROM push_jobs WHERE id = \(id))
             GROUP BY status, error_code ORDER BY count(*) DESC, status, error_code
            """, on: client, logger: logger)
        var outcomes: [JobOutcome] = []
        for row in rows {
            let (status, code, count) = try row.decode((DeliveryStatus, String?, Int).self)
            outcomes.append(JobOutcome(status: status, errorCode: code, count: count))
        }
        return outcomes
    }

    public enum Cancellation: Sendable, Equatable {
        case cancelled
        case alreadyFinished(status: JobStatus)
        case notFound
    }

    /// Cancels a queued or running job: nothing more is sent; what was sent stays logged, and its
    /// pending deliveries not in flight become `skipped` (CANCELLED).
    public func cancel(_ id: Int64) async throws -> Cancellation {
        if try await end(id, .cancelled) { return .cancelled }
        let rows = try await DatabaseStatement.run("SELECT status FROM push_jobs WHERE id = \(id)", on: client, logger: logger)
        if let row = rows.first { return .alreadyFinished(status: try row.decode(JobStatus.self)) }
        return .notFound
    }

    public enum Ending: Sendable {
        case cancelled
        /// The job as a whole cannot be delivered (no credentials, refused payload, …).
        case failed(reason: String)
    }

    /// Ends a queued or running job for good: the job row, then its pending deliveries and chunks
    /// that no worker holds (in-flight ones are recorded when their send returns, and the worker
    /// then sends nothing more). False when the job was not queued or running.
    @discardableResult
    public func end(_ id: Int64, _ ending: Ending) async throws -> Bool {
        try await DatabaseTransaction.run(client, logger: logger) { transaction in
            try await Self.end(id, ending, in: transaction)
        }
    }

    /// How an ending's message goes on for a delivery whose worker stopped while holding it.
    public static let heldByAStoppedWorker = "its worker had stopped while holding it, so it may have been sent"

    /// A cancelled job's deliveries' message.
    public static let cancelledMessage = "the job was cancelled"

    /// The channel an ending NOTIFYs at its commit, the job's id as the payload: workers holding
    /// the job's deliveries stop sending them at once rather than at their next check of it.
    public static let endedJobsChannel = "push_job_ended"

    /// ``end(_:_:)`` inside the caller's transaction, so that a worker commits the results that
    /// end a job with the ending itself: no other worker sees one without the other.
    public static func end(_ id: Int64, _ ending: Ending, in transaction: DatabaseTransaction) async throws -> Bool {
        let (status, deliveryStatus, code, reason): (JobStatus, DeliveryStatus, DeliveryErrorCode, String?) =
            switch ending {
            case .cancelled: (.cancelled, .skipped, .cancelled, nil)
            // The reason quotes FCM's or Google's answer: as a text column can hold it.
            case .failed(let reason): (.failed, .failed, .jobFailed, reason.storable())
            }
        let message = reason ?? Self.cancelledMessage
        // A lease that ran out means its worker stopped while holding the delivery: it may have
        // been written to FCM, or answered, before the worker's results were.
        let heldMessage = message + "; " + Self.heldByAStoppedWorker
        // Waits for a worker expanding the audience (it holds the job row), so the second
        // statement, with a snapshot of its own, sees the chunk that worker just inserted.
        // A job already completed, failed or cancelled keeps its status: endings are final.
        let endedJobs = try await transaction.query(
            """
            UPDATE push_jobs SET status = \(status), finished_at = now(), last_error = \(reason)
             WHERE id = \(id) AND status IN ('queued', 'running')
            RETURNING id
            """)
        guard !endedJobs.isEmpty else { return false }
        try await transaction.query("SELECT pg_notify(\(Self.endedJobsChannel), \(String(id)))")
        try await transaction.query(
            """
            UPDATE push_deliveries SET status = \(deliveryStatus), error_code = \(code),
                                       error_message = CASE WHEN lease_owner IS NULL THEN \(message) ELSE \(heldMessage) END,
                                       lease_owner = NULL, updated_at = now()
             WHERE job_id = \(id) AND job_created_at = (SELECT created_at FROM push_jobs WHERE id = \(id))
               AND status = 'pending' AND (lease_owner IS NULL OR next_attempt_at <= now())
            """)
        // Chunks whose worker is gone: their devices without a row end the same way. A device
        // an operator deleted meanwhile gets none (its foreign key would refuse the ending). A
        // chunk released at a worker's stop has no owner: nothing of it was in flight.
        try await transaction.query(
            """
            WITH expired AS (
                DELETE FROM push_job_chunks WHERE job_id = \(id) AND lease_until <= now() RETURNING device_ids, lease_owner)
            INSERT INTO push_deliveries (job_id, device_id, status, error_code, error_message, job_created_at, app_id)
            SELECT \(id), dev.id, \(deliveryStatus), \(code), CASE WHEN lease_owner = '' THEN \(message) ELSE \(heldMessage) END,
                   j.created_at, j.app_id
              FROM expired CROSS JOIN LATERAL unnest(device_ids) AS dev(id) JOIN push_devices d ON d.id = dev.id
              JOIN push_jobs j ON j.id = \(id)
            ON CONFLICT ON CONSTRAINT push_deliveries_job_device_key DO NOTHING
            """)
        // What is still pending or in a chunk, a worker holds, and records when its sends return.
        // If it stops first, nothing would settle its rows (claims take only running jobs'):
        // the job is listed for ``settleHeldAtEndings()``. A worker's write that read the job
        // running before this ending commits after it still holds its chunk or its row now.
        try await transaction.query(
            """
            INSERT INTO push_jobs_held_at_ending (job_id)
            SELECT \(id) WHERE EXISTS (SELECT FROM push_deliveries
                                        WHERE job_id = \(id) AND job_created_at = (SELECT created_at FROM push_jobs WHERE id = \(id))
                                          AND status = 'pending')
                            OR EXISTS (SELECT FROM push_job_chunks WHERE job_id = \(id))
            ON CONFLICT DO NOTHING
            """)
        return true
    }

    /// Settles what a job's ending left to its workers once they are done with it: pending
    /// deliveries of cancelled and failed jobs that no worker holds (a write that raced the
    /// ending left them), or whose lease ran out (their worker stopped: they may have been
    /// sent, and say so), end as the job's ending ended the others. A job with nothing pending
    /// and no chunk left is forgotten, a pass after its last row was settled. Returns how many
    /// deliveries it settled. push-worker runs it every second; several at once skip each
    /// other's jobs.
    public func settleHeldAtEndings() async throws -> Int {
        let rows = try await DatabaseStatement.run(
            """
            WITH ended AS (
                SELECT h.job_id, j.created_at, j.status = 'cancelled' AS cancelled, j.last_error
                  FROM push_jobs_held_at_ending h JOIN push_jobs j ON j.id = h.job_id
                   FOR UPDATE OF h SKIP LOCKED),
            settled AS (
                UPDATE push_deliveries d
                   SET status = CASE WHEN e.cancelled THEN \(DeliveryStatus.skipped) ELSE \(DeliveryStatus.failed) END,
                       error_code = CASE WHEN e.cancelled THEN \(DeliveryErrorCode.cancelled) ELSE \(DeliveryErrorCode.jobFailed) END,
                       error_message = concat_ws('; ', CASE WHEN e.cancelled THEN \(Self.cancelledMessage) ELSE e.last_error END,
                                                 CASE WHEN d.lease_owner IS NOT NULL THEN \(Self.heldByAStoppedWorker) END),
                       lease_owner = NULL, updated_at = now()
                  FROM ended e
                 WHERE d.job_id = e.job_id AND d.job_created_at = e.created_at AND d.status = 'pending'
                   AND (d.lease_owner IS NULL OR d.next_attempt_at <= now())
                RETURNING d.id),
            forgotten AS (
                -- Read as the statement began: what the update above settles still looks pending,
                -- and so does what a worker is writing.
                DELETE FROM push_jobs_held_at_ending h USING ended e
                 WHERE h.job_id = e.job_id
                   AND NOT EXISTS (SELECT FROM push_deliveries d
                                    WHERE d.job_id = e.job_id AND d.job_created_at = e.created_at AND d.status = 'pending')
                   AND NOT EXISTS (SELECT FROM push_job_chunks c WHERE c.job_id = e.job_id))
            SELECT count(*)::int FROM settled
            """, on: client, logger: logger)
        return try rows.first?.decode(Int.self) ?? 0
    }

    /// Deactivates active devices not seen for `idleDays` (reason `stale`), or only counts them.
    /// Returns the count per app code.
    public func prune(idleDays: Int, dryRun: Bool) async throws -> [(app: String, devices: Int)] {
        let rows: PostgresQueryResult
        if dryRun {
            rows = try await DatabaseStatement.run(
                """
                SELECT a.code, count(*)::int FROM push_devices d JOIN apps a ON a.id = d.app_id
                 WHERE d.is_active AND d.last_used_at < now() - make_interval(days => \(idleDays)::int)
                 GROUP BY a.code ORDER BY a.code
                """, on: client, logger: logger)
        } else {
            rows = try await DatabaseStatement.run(
                """
                WITH pruned AS (
                    UPDATE push_devices SET is_active = false, deactivated_at = now(), deactivation_reason = \(DeactivationReason.stale), updated_at = now()
                     WHERE is_active AND last_used_at < now() - make_interval(days => \(idleDays)::int)
                    RETURNING app_id)
                SELECT a.code, count(*)::int FROM pruned p JOIN apps a ON a.id = p.app_id GROUP BY a.code ORDER BY a.code
                """, on: client, logger: logger)
        }
        var result: [(app: String, devices: Int)] = []
        for row in rows {
            let (app, count) = try row.decode((String, Int).self)
            result.append((app, count))
        }
        return result
    }

    private static let select = """
        SELECT j.id, a.code, j.status, j.send_at, j.created_at, j.finished_at, j.validate_only, j.priority, j.expires_at,
               j.user_ids IS NULL, j.message #>> '{notification,title}',
               COALESCE(j.last_error,
                        (SELECT f.error_code || ': ' || COALESCE(f.error_message, '') FROM push_deliveries f
                          WHERE f.job_id = j.id AND f.job_created_at = j.created_at AND f.status = 'failed' ORDER BY f.updated_at, f.id LIMIT 1)),
               -- Nothing expanded, nothing left to expand: the audience was never counted.
               CASE WHEN j.finished_at IS NOT NULL AND NOT j.audience_complete AND c.rows + u.devices = 0 THEN NULL
                    ELSE (c.rows + u.devices)::int END,
               c.sent::int, c.failed::int, c.skipped::int, c.expired::int, (c.pending + u.devices)::int
          FROM push_jobs j JOIN apps a ON a.id = j.app_id
               -- Workers expand an audience as they send it, and write a delivery's row with its
               -- result: the part not expanded yet and the part in flight are pending too.
               CROSS JOIN LATERAL (SELECT push_job_unexpanded(j.status, j.audience_complete, j.app_id, j.user_ids, j.platforms,
                                                              j.audience_cursor)
                                          + push_job_in_flight(j.id) AS devices) u
               -- Counted per job, beside it: a join and GROUP BY evaluated the functions above
               -- once per delivery row.
               CROSS JOIN LATERAL (SELECT count(*) AS rows,
                                          count(*) FILTER (WHERE d.status = 'sent') AS sent,
                                          count(*) FILTER (WHERE d.status = 'failed') AS failed,
                                          count(*) FILTER (WHERE d.status = 'skipped') AS skipped,
                                          count(*) FILTER (WHERE d.status = 'skipped' AND d.error_code = 'EXPIRED') AS expired,
                                          count(*) FILTER (WHERE d.status = 'pending') AS pending
                                     FROM push_deliveries d WHERE d.job_id = j.id AND d.job_created_at = j.created_at) c
        """

    private func summaries(_ rows: PostgresQueryResult) throws -> [JobSummary] {
        var jobs: [JobSummary] = []
        typealias Row = (
            Int64, String, JobStatus, Date, Date, Date?, Bool, JobPriority, Date?, Bool, String?, String?, Int?, Int, Int, Int, Int, Int
        )
        for row in try rows.map({ try $0.decode(Row.self) }) {
            jobs.append(
                JobSummary(
                    id: row.0, appCode: row.1, kind: row.9 ? .campaign : .single, title: row.10, status: row.2,
                    sendAt: row.3, createdAt: row.4, finishedAt: row.5,
                    audience: row.12, sent: row.13, failed: row.14, skipped: row.15, pending: row.17,
                    dryRun: row.6, firstError: row.11, priority: row.7, expiresAt: row.8, expired: row.16))
        }
        return jobs
    }
}
