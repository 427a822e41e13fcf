import DeviceRegistry
import Foundation
import Logging
import PostgresNIO

/// The queue's SQL: expanding job audiences into leased deliveries, claiming due deliveries under a lease,
/// writing results back in batches, finishing and failing jobs.
struct DeliveryQueue: Sendable {
    let client: PostgresClient
    let worker: String
    let lease: Duration
    let logger: Logger

    var leaseSeconds: Double { Double(lease.components.seconds) + Double(lease.components.attoseconds) / 1e18 }

    /// A due job with audience left to expand, and what its expansion reads.
    struct Audience: Sendable {
        let job: Int64
        let app: Int64
        let users: [Int64]?
        let platforms: [String]?
    }

    /// Due jobs whose audience is not fully expanded, oldest first, apart from paused apps' and
    /// the given jobs.
    func unexpandedJobs(excludingApps paused: [Int64], excludingJobs ended: [Int64], limit: Int) async throws -> [Audience] {
        let rows = try await client.query(
            """
            SELECT id, app_id, user_ids, platforms FROM push_jobs
             WHERE status IN ('queued', 'running') AND NOT audience_complete AND send_at <= now()
               AND NOT (app_id = ANY(\(paused)::bigint[])) AND NOT (id = ANY(\(ended)::bigint[]))
             ORDER BY send_at, id
             LIMIT \(limit)
            """, logger: logger)
        var jobs: [Audience] = []
        for try await (job, app, users, platforms) in rows.decode((Int64, Int64, [Int64]?, [String]?).self) {
            jobs.append(Audience(job: job, app: app, users: users, platforms: platforms))
        }
        return jobs
    }

    /// The expansion's SQL, apart so that a test can check its plan.
    func expandStatement(_ audience: Audience, limit: Int) -> PostgresQuery {
        """
        -- The job row is locked: workers expanding one job take turns, each from the cursor the
        -- previous one left (READ COMMITTED re-reads a row it waited for).
        WITH job AS (
            SELECT audience_cursor FROM push_jobs
             WHERE id = \(audience.job) AND status IN ('queued', 'running') AND NOT audience_complete
               FOR UPDATE),
        chunk AS (
            SELECT d.id, d.token, d.token_type FROM push_devices d
             WHERE d.app_id = \(audience.app) AND d.is_active AND d.id > (SELECT audience_cursor FROM job)
               AND (\(audience.users)::bigint[] IS NULL OR d.user_id = ANY(\(audience.users)::bigint[]))
               AND (\(audience.platforms)::text[] IS NULL OR d.platform = ANY(\(audience.platforms)::text[]))
             ORDER BY d.id
             LIMIT \(limit)),
        inserted AS (
            INSERT INTO push_deliveries (job_id, device_id, lease_owner, next_attempt_at)
            SELECT \(audience.job), id, \(worker), now() + make_interval(secs => \(leaseSeconds)) FROM chunk
            ON CONFLICT ON CONSTRAINT push_deliveries_job_device_key DO NOTHING
            RETURNING id, device_id),
        advanced AS (
            UPDATE push_jobs
               SET status = 'running', started_at = COALESCE(started_at, now()),
                   audience_cursor = COALESCE((SELECT max(id) FROM chunk), audience_cursor),
                   audience_complete = (SELECT count(*) FROM chunk) < \(limit)
             WHERE id = \(audience.job) AND EXISTS (SELECT FROM job)
            RETURNING audience_complete)
        SELECT i.id, i.device_id, c.token, c.token_type, (SELECT audience_complete FROM advanced)
          FROM inserted i JOIN chunk c ON c.id = i.device_id
        """
    }

    /// Expands the next `limit` devices of a job's audience into deliveries already leased to
    /// this worker: the rows it is about to send, written once here and once with their result,
    /// never claimed separately. A crashed worker's are taken over when the lease runs out, like
    /// claimed ones. `complete`: nothing of the audience is left to expand (or the job ended).
    func expandAndClaim(_ audience: Audience, limit: Int) async throws -> (claimed: [Claimed], complete: Bool) {
        let rows = try await client.query(expandStatement(audience, limit: limit), logger: logger)
        var claimed: [Claimed] = []
        var complete = true
        for try await (id, device, token, type, done) in rows.decode((Int64, Int64, String, String, Bool?).self) {
            claimed.append(Claimed(deliveryID: id, jobID: audience.job, attempts: 0, deviceID: device, token: token,
                                   tokenType: TokenType(rawValue: type) ?? .fcm, deviceActive: true))
            complete = done ?? true
        }
        return (claimed, complete)
    }

    struct Claimed: Sendable {
        let deliveryID: Int64
        let jobID: Int64
        let attempts: Int
        let deviceID: Int64
        let token: String
        let tokenType: TokenType
        let deviceActive: Bool
    }

    /// The claim's SQL, apart so that a test can check its plan.
    func claimStatement(limit: Int, excludingApps paused: [Int64]) -> PostgresQuery {
        """
        -- One table, in push_deliveries_claimable's order: the plan is that index read up to the
        -- limit, whatever the (during a campaign, always stale) statistics say. The job check is a
        -- per-row subquery, not a join, so that no plan reaches the pending rows through their
        -- job and sorts them all (see sql/005_claim_plans.sql).
        WITH candidates AS (
            SELECT d.id FROM push_deliveries d
             WHERE d.status = 'pending' AND d.next_attempt_at <= now()
               AND (SELECT j.status = 'running' AND NOT (j.app_id = ANY(\(paused)::bigint[]))
                      FROM push_jobs j WHERE j.id = d.job_id)
             ORDER BY d.next_attempt_at, d.id
             LIMIT \(limit)
               FOR UPDATE OF d SKIP LOCKED),
        leased AS (
            UPDATE push_deliveries d
               SET lease_owner = \(worker), next_attempt_at = now() + make_interval(secs => \(leaseSeconds))
              FROM candidates c
             WHERE d.id = c.id
            RETURNING d.id, d.job_id, d.attempts, d.device_id)
        SELECT l.id, l.job_id, l.attempts, v.id, v.token, v.token_type, v.is_active
          FROM leased l JOIN push_devices v ON v.id = l.device_id
        """
    }

    /// Claims up to `limit` due deliveries of running jobs, leasing them to this worker.
    func claim(limit: Int, excludingApps paused: [Int64]) async throws -> [Claimed] {
        let rows = try await client.query(claimStatement(limit: limit, excludingApps: paused), logger: logger)
        var claimed: [Claimed] = []
        for try await (id, job, attempts, device, token, type, active) in rows.decode((Int64, Int64, Int, Int64, String, String, Bool).self) {
            claimed.append(Claimed(deliveryID: id, jobID: job, attempts: attempts, deviceID: device, token: token,
                                   tokenType: TokenType(rawValue: type) ?? .fcm, deviceActive: active))
        }
        return claimed
    }

    struct Job: Sendable {
        let id: Int64
        let appID: Int64
        let appCode: String
        let message: PreparedMessage
        let account: ServiceAccount?
    }

    func jobs(_ ids: [Int64]) async throws -> [Job] {
        let rows = try await client.query(
            """
            SELECT j.id, j.app_id, a.code, j.message::text, j.validate_only,
                   a.fcm_project_id, a.fcm_client_email, a.fcm_private_key, a.fcm_private_key_id
              FROM push_jobs j JOIN apps a ON a.id = j.app_id
             WHERE j.id = ANY(\(ids))
            """, logger: logger)
        var jobs: [Job] = []
        for try await (id, app, code, message, validateOnly, project, email, key, keyID) in rows.decode(
            (Int64, Int64, String, String, Bool, String?, String?, String?, String?).self
        ) {
            let account = project.flatMap { project in
                email.flatMap { email in key.map { ServiceAccount(projectID: project, clientEmail: email, privateKeyPEM: $0, privateKeyID: keyID) } }
            }
            jobs.append(Job(id: id, appID: app, appCode: code, message: PreparedMessage(messageJSON: message, validateOnly: validateOnly),
                            account: account))
        }
        return jobs
    }

    /// A final or retry state for one delivery.
    struct Result: Sendable {
        let deliveryID: Int64
        let status: String  // pending (retry), sent, failed, skipped
        let errorCode: String?
        let errorMessage: String?
        let messageID: String?
        let attempted: Bool
        let nextAttempt: Date
    }

    /// The most results one statement writes: large enough to be cheap per row, small enough to
    /// stay on primary-key lookups.
    static let resultsPerStatement = 2000

    /// Writes device deactivations, then results, a statement per `resultsPerStatement`.
    /// Results for leases this worker no longer holds are dropped (another worker took over).
    /// A retry of a job that is no longer running becomes final.
    func record(_ results: [Result], deactivate: [(deviceID: Int64, reason: String)]) async throws {
        if !deactivate.isEmpty {
            try await client.query(
                """
                UPDATE push_devices v
                   SET is_active = false, deactivated_at = now(), deactivation_reason = r.reason, updated_at = now()
                  FROM unnest(\(deactivate.map(\.deviceID))::bigint[], \(deactivate.map(\.reason))::text[]) AS r(id, reason)
                 WHERE v.id = r.id AND v.is_active
                """, logger: logger)
        }
        for start in stride(from: 0, to: results.count, by: Self.resultsPerStatement) {
            try await client.query(recordStatement(results[start..<min(start + Self.resultsPerStatement, results.count)]), logger: logger)
        }
    }

    /// The rows are found by primary key (`d.id = ANY`), and the lease is compared as a join
    /// column, never as a constant: statistics taken between campaigns say no row has a lease
    /// owner, and with `d.lease_owner = 'me'` the planner expected one row, scanned the whole
    /// table for it and then rescanned the results once per row found (seconds per batch).
    func recordStatement(_ results: ArraySlice<Result>) -> PostgresQuery {
        let ids = results.map(\.deliveryID)
        return """
            UPDATE push_deliveries d
               -- A retry of a job that ended meanwhile is never tried again: skipped like the job's other
               -- pending deliveries when it was cancelled, failed with it when it failed.
               SET status = CASE WHEN r.status <> 'pending' OR j.status = 'running' THEN r.status
                                 WHEN j.status = 'cancelled' THEN 'skipped' ELSE 'failed' END,
                   error_code = CASE WHEN r.status <> 'pending' OR j.status = 'running' THEN NULLIF(r.code, '')
                                     WHEN j.status = 'cancelled' THEN 'CANCELLED' ELSE 'JOB_' || upper(j.status) END,
                   error_message = CASE WHEN r.status <> 'pending' OR j.status = 'running' THEN NULLIF(r.message, '')
                                        WHEN j.status = 'cancelled' THEN 'the job was cancelled' ELSE NULLIF(r.message, '') END,
                   fcm_message_id = NULLIF(r.message_id, ''),
                   attempts = d.attempts + r.attempted,
                   next_attempt_at = r.next_attempt,
                   lease_owner = NULL,
                   updated_at = now()
              FROM unnest(\(ids)::bigint[], \(results.map(\.status))::text[],
                          \(results.map { $0.errorCode ?? "" })::text[], \(results.map { $0.errorMessage ?? "" })::text[],
                          \(results.map { $0.messageID ?? "" })::text[], \(results.map { $0.attempted ? 1 : 0 })::int[],
                          \(results.map(\.nextAttempt))::timestamptz[], \(Array(repeating: worker, count: results.count))::text[])
                   AS r(id, status, code, message, message_id, attempted, next_attempt, lease_owner),
                   push_jobs j
             WHERE d.id = ANY(\(ids)) AND d.id = r.id AND d.lease_owner = r.lease_owner AND j.id = d.job_id
            """
    }

    /// Keeps this worker's leases alive while their sends are in flight.
    func heartbeat(_ deliveryIDs: [Int64]) async throws {
        guard !deliveryIDs.isEmpty else { return }
        try await client.query(
            """
            UPDATE push_deliveries SET next_attempt_at = now() + make_interval(secs => \(leaseSeconds))
             WHERE id = ANY(\(deliveryIDs)) AND lease_owner = \(worker) AND status = 'pending'
            """, logger: logger)
    }

    /// Marks jobs completed once their audience is expanded and nothing is pending.
    func completeFinished(_ jobIDs: [Int64]) async throws {
        guard !jobIDs.isEmpty else { return }
        try await client.query(
            """
            UPDATE push_jobs j SET status = 'completed', finished_at = now()
             WHERE j.id = ANY(\(jobIDs)) AND j.status = 'running' AND j.audience_complete
               AND NOT EXISTS (SELECT 1 FROM push_deliveries d WHERE d.job_id = j.id AND d.status = 'pending')
            """, logger: logger)
    }

    /// Fails a job with a reason for people; its deliveries not in flight fail with it.
    func fail(job: Int64, error: String) async throws {
        try await JobDirectory(client: client, logger: logger).end(job, .failed(reason: error))
    }

    /// Queue depth (pending deliveries and due audiences not expanded yet) and the age of the
    /// oldest due job, for /metrics.
    func depth() async throws -> (pending: Int, oldestDueSeconds: Double) {
        let rows = try await client.query(
            """
            SELECT ((SELECT count(*) FROM push_deliveries WHERE status = 'pending')
                    + (SELECT COALESCE(sum(push_job_unexpanded(status, audience_complete, app_id, user_ids, platforms, audience_cursor)), 0)
                         FROM push_jobs WHERE status IN ('queued', 'running') AND NOT audience_complete AND send_at <= now()))::int,
                   COALESCE((SELECT extract(epoch FROM now() - min(send_at)) FROM push_jobs
                              WHERE status IN ('queued', 'running') AND send_at <= now()), 0)::float8
            """, logger: logger)
        for try await row in rows.decode((Int, Double).self) { return row }
        return (0, 0)
    }
}
