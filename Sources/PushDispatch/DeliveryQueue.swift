import DeviceRegistry
import Foundation
import Logging
import PostgresNIO
import ServiceSupport

/// The queue's SQL: taking job audiences as leased chunks (and taking over expired ones), claiming
/// due retries under a lease, writing results back in batches, finishing and failing jobs.
struct DeliveryQueue: Sendable {
    let client: PostgresClient
    let worker: String
    let lease: Duration
    let logger: Logger
    /// The queue's fixed statements (``QueueStatement``) are prepared unless a transaction
    /// pooler stands between: then they go unnamed.
    var pooler: PoolerMode = .session

    /// A due job with audience left to expand, and what its expansion reads.
    struct Audience: Sendable {
        let job: Int64
        let app: Int64
        let users: [Int64]?
        let platforms: [String]?
        var priority: JobPriority = .normal
        /// The app has `max_sends_per_second`: its expansions take from the shared budget.
        var rateCapped = false
    }

    /// Which of these jobs are still running.
    func running(_ jobIDs: [Int64]) async throws -> Set<Int64> {
        var running: Set<Int64> = []
        for row in try await run(RunningJobsStatement(jobIDs)) { try running.insert(row.decode(Int64.self)) }
        return running
    }

    /// Due, unexpired jobs whose audience is not fully expanded, by priority then due time,
    /// apart from paused apps' and the given jobs; only `priority`'s when given.
    func unexpandedJobs(
        excludingApps paused: [Int64], excludingJobs ended: [Int64], priority: JobPriority? = nil,
        limit: Int
    ) async throws -> [Audience] {
        let rows = try await run(UnexpandedJobsStatement(priority: priority, excludingApps: paused, excludingJobs: ended, limit: limit))
        var jobs: [Audience] = []
        for row in rows {
            let (job, app, users, platforms, priority, capped) = try row.decode(
                (Int64, Int64, [Int64]?, [String]?, JobPriority, Bool).self)
            jobs.append(
                Audience(
                    job: job, app: app, users: users, platforms: platforms, priority: priority,
                    rateCapped: capped))
        }
        return jobs
    }

    /// Takes up to `wanted` first sends from a capped app's budget, shared by every worker
    /// (sql/012); a negative `wanted` gives unused ones back. Returns how many were granted.
    func takeSendBudget(app: Int64, wanted: Int) async throws -> Int {
        let rows = try await run("SELECT push_take_send_budget(\(app), \(wanted)::int)")
        return try rows.first?.decode(Int.self) ?? 0
    }

    /// Skips what expired jobs have left and completes those with nothing in flight (sql/012).
    /// Returns the jobs it completed.
    func expireJobs() async throws -> [Int64] {
        try await run("SELECT push_expire_jobs()").map { try $0.decode(Int64.self) }
    }

    /// Settles what jobs' endings left pending once no worker holds it (``JobDirectory/settleHeldAtEndings()``).
    func settleHeldAtEndings() async throws -> Int {
        try await JobDirectory(client: client, logger: logger).settleHeldAtEndings()
    }

    /// The most devices in one chunk: a send slice, and what any worker has room to take over.
    static let chunkSize = 64

    /// An expansion as it runs unnamed (planned for its values), apart so that a test can check
    /// its plan: a whole app's audience, or one of more users than
    /// ``AudienceExpansionStatement/preparedUsers``.
    func expandStatement(_ audience: Audience, limit: Int) -> PostgresQuery {
        let text = audience.users == nil ? AudienceExpansionStatement.appSQL : AudienceExpansionStatement.sql
        return PostgresQuery(unsafeSQL: text, binds: expansion(audience, limit: limit).bindings)
    }

    private func expansion(_ audience: Audience, limit: Int) -> AudienceExpansionStatement {
        AudienceExpansionStatement(
            job: audience.job, app: audience.app, users: audience.users, platforms: audience.platforms, limit: limit,
            worker: worker, lease: lease)
    }

    /// Takes the next `limit` devices of a job's audience as chunks leased to this worker: no
    /// delivery row is written until each device's result is (``record(_:finishedChunks:deactivate:)``).
    /// A crashed worker's chunks are taken over when the lease runs out (``takeOverChunks(room:excludingApps:)``).
    /// `complete`: nothing of the audience is left to expand (or the job ended).
    func expandAndClaim(_ audience: Audience, limit: Int) async throws -> (claimed: [Claimed], complete: Bool) {
        let rows =
            if let users = audience.users, users.count <= AudienceExpansionStatement.preparedUsers {
                try await run(expansion(audience, limit: limit))
            } else {
                Array(try await run(expandStatement(audience, limit: limit)))
            }
        var claimed: [Claimed] = []
        var complete = true
        for row in rows {
            let (chunk, device, token, type, done) = try row.decode((Int64, Int64, String, TokenType, Bool?).self)
            claimed.append(
                Claimed(
                    lease: .chunk(chunk), jobID: audience.job, attempts: 0, deviceID: device, token: token,
                    tokenType: type, deviceActive: true, jobRunning: true))
            complete = done ?? true
        }
        return (claimed, complete)
    }

    /// What holds a claimed delivery for this worker: its own row (a retry, a lease taken over),
    /// or a chunk of the audience whose devices have no row yet.
    enum Lease: Hashable, Sendable {
        case row(Int64)
        case chunk(Int64)
    }

    struct Claimed: Sendable {
        let lease: Lease
        let jobID: Int64
        let attempts: Int
        let deviceID: Int64
        let token: String
        let tokenType: TokenType
        let deviceActive: Bool
        /// False for a taken-over chunk of a job that ended meanwhile: its devices are recorded
        /// as the job's ending says, not sent.
        var jobRunning: Bool
        /// Of a chunk taken over from a worker that stopped holding it (not one released at a
        /// clean stop): that worker may have sent it.
        var mayHaveBeenSent = false

        var ended: Claimed {
            var ended = self
            ended.jobRunning = false
            return ended
        }
    }

    /// What the claim's transaction sets before it (see ``claim(limit:excludingApps:)``).
    static let claimPlanSetting: PostgresQuery = "SET LOCAL enable_sort = off"

    /// The claim's SQL, apart so that a test can check its plan.
    func claimStatement(limit: Int, excludingApps paused: [Int64], jobsCreated span: CreationSpan) -> PostgresQuery {
        """
        -- One table, in push_deliveries_claimable's order: the plan is that index read up to the
        -- limit, whatever the (during a campaign, always stale) statistics say. The job check is a
        -- per-row subquery, not a join, so that no plan reaches the pending rows through their
        -- job and sorts them all (see sql/005_claim_plans.sql). Only the running jobs' days are
        -- planned (CreationSpan), in the read and in the update.
        WITH candidates AS (
            SELECT d.id, d.job_created_at FROM push_deliveries d
             WHERE d.status = 'pending' AND d.next_attempt_at <= now()
               AND d.job_created_at BETWEEN \(span.earliest) AND \(span.latest)
               AND (SELECT j.status = 'running' AND NOT (j.app_id = ANY(\(paused)::bigint[]))
                           AND (j.expires_at IS NULL OR j.expires_at > now())
                      FROM push_jobs j WHERE j.id = d.job_id)
             ORDER BY d.next_attempt_at, d.id
             LIMIT \(limit)
               FOR UPDATE OF d SKIP LOCKED),
        leased AS (
            UPDATE push_deliveries d
               SET lease_owner = \(worker), next_attempt_at = now() + make_interval(secs => \(lease.inSeconds))
              FROM candidates c
             WHERE d.id = c.id AND d.job_created_at = c.job_created_at
               AND d.job_created_at BETWEEN \(span.earliest) AND \(span.latest)
            RETURNING d.id, d.job_id, d.attempts, d.device_id)
        SELECT l.id, l.job_id, l.attempts, v.id, v.token, v.token_type, v.is_active
          FROM leased l JOIN push_devices v ON v.id = l.device_id
        """
    }

    /// Claims up to `limit` due deliveries of running jobs, leasing them to this worker.
    func claim(limit: Int, excludingApps paused: [Int64]) async throws -> [Claimed] {
        // Only running jobs' deliveries are claimed: without one, there is nothing to plan.
        guard let span = try await runningJobsSpan() else { return [] }
        // Each day's partition reads its part of push_deliveries_claimable in order, and a merge
        // keeps that order across them, unless the planner is free to sort: with the statistics
        // of a partition taken before its retries piled up it expects a handful of due rows and
        // sorts them all instead (340 ms a claim for 100,000 due rows, measured).
        let rows = try await DatabaseTransaction.run(client, logger: logger) { transaction in
            try await transaction.query(Self.claimPlanSetting)
            return try await transaction.query(claimStatement(limit: limit, excludingApps: paused, jobsCreated: span))
        }
        var claimed: [Claimed] = []
        for row in rows {
            let (id, job, attempts, device, token, type, active) = try row.decode(
                (Int64, Int64, Int, Int64, String, TokenType, Bool).self)
            claimed.append(
                Claimed(
                    lease: .row(id), jobID: job, attempts: attempts, deviceID: device, token: token,
                    tokenType: type, deviceActive: active, jobRunning: true))
        }
        return claimed
    }

    /// Expired chunks taken over: as many as `room` holds chunks of ``chunkSize``, and always at
    /// least one, so that a worker with less room than a chunk (a smaller `WORKER_CONCURRENCY`
    /// than the crashed worker's) still takes it and holds back what does not fit. Only the
    /// devices without a row yet are returned; `empty` lists taken chunks with none left, to be
    /// deleted (their jobs may be finished then).
    func takeOverChunks(room: Int, excludingApps paused: [Int64]) async throws -> (claimed: [Claimed], empty: [(chunk: Int64, job: Int64)])
    {
        // The span of the expired chunks' jobs bounds both the chunks taken and the days planned
        // for their rows: a chunk of a job outside it (expired since) waits for the next call.
        guard let span = try await creationSpan(of: ExpiredChunksSpanStatement()) else { return ([], []) }
        let rows = try await run(takeOverStatement(room: room, excludingApps: paused, jobsCreated: span))
        var claimed: [Claimed] = []
        var empty: [(chunk: Int64, job: Int64)] = []
        for row in rows {
            let (chunk, job, running, abandoned, device, token, type, active) = try row.decode(
                (Int64, Int64, Bool, Bool, Int64?, String?, TokenType?, Bool?).self)
            guard let device, let token, let type else {
                empty.append((chunk, job))
                continue
            }
            claimed.append(
                Claimed(
                    lease: .chunk(chunk), jobID: job, attempts: 0, deviceID: device, token: token,
                    tokenType: type, deviceActive: active ?? false, jobRunning: running, mayHaveBeenSent: abandoned))
        }
        return (claimed, empty)
    }

    /// The takeover's SQL, apart so that a test can check its plan.
    func takeOverStatement(room: Int, excludingApps paused: [Int64], jobsCreated span: CreationSpan) -> PostgresQuery {
        """
        WITH candidates AS (
            SELECT c.id, c.lease_owner FROM push_job_chunks c
             WHERE c.lease_until <= now()
               AND (SELECT NOT (j.app_id = ANY(\(paused)::bigint[])) AND j.created_at BETWEEN \(span.earliest) AND \(span.latest)
                      FROM push_jobs j WHERE j.id = c.job_id)
             ORDER BY c.lease_until, c.id
             LIMIT \(max(1, room / Self.chunkSize))
               FOR UPDATE SKIP LOCKED),
        taken AS (
            UPDATE push_job_chunks c
               SET lease_owner = \(worker), lease_until = now() + make_interval(secs => \(lease.inSeconds))
              FROM candidates x
             WHERE c.id = x.id
            RETURNING c.id, c.job_id, c.device_ids)
        -- A chunk released at a clean stop has no owner ('').
        SELECT t.id, t.job_id, j.status = 'running', x.lease_owner <> '', v.id, v.token, v.token_type, v.is_active
          FROM taken t JOIN candidates x ON x.id = t.id JOIN push_jobs j ON j.id = t.job_id
               LEFT JOIN LATERAL (
                   SELECT v.id, v.token, v.token_type, v.is_active
                     FROM unnest(t.device_ids) AS dev(id) JOIN push_devices v ON v.id = dev.id
                    WHERE NOT EXISTS (SELECT FROM push_deliveries d
                                       WHERE d.job_id = t.job_id AND d.job_created_at = j.created_at AND d.device_id = dev.id
                                         AND d.job_created_at BETWEEN \(span.earliest) AND \(span.latest))) v ON true
        """
    }

    struct Job: Sendable {
        let id: Int64
        let appID: Int64
        let appCode: String
        let message: PreparedMessage
        let account: ServiceAccount?
        /// A send to the app's project has succeeded before (`apps.fcm_proven_project_id`).
        let projectProven: Bool
        var priority: JobPriority = .normal
        /// Not sent after this: skipped (EXPIRED).
        var expiresAt: Date? = nil
    }

    func jobs(_ ids: [Int64]) async throws -> [Job] {
        let rows = try await run(JobDetailsStatement(ids))
        var jobs: [Job] = []
        for row in rows {
            let (id, app, code, message, validateOnly, project, email, key, keyID, proven, priority, expiresAt) = try row.decode(
                (Int64, Int64, String, String, Bool, String?, String?, String?, String?, Bool, JobPriority, Date?).self)
            let account = project.flatMap { project in
                email.flatMap { email in
                    key.map { ServiceAccount(projectID: project, clientEmail: email, privateKeyPEM: $0, privateKeyID: keyID) }
                }
            }
            jobs.append(
                Job(
                    id: id, appID: app, appCode: code,
                    message: PreparedMessage(messageJSON: message, validateOnly: validateOnly, expiresAt: expiresAt),
                    account: account, projectProven: proven, priority: priority,
                    expiresAt: expiresAt))
        }
        return jobs
    }

    /// Records that sends to these apps' projects succeed (see sql/008_proven_projects.sql).
    func proveStatement(_ projects: [(appID: Int64, projectID: String)]) -> PostgresQuery {
        """
        UPDATE apps a SET fcm_proven_project_id = p.project_id
          FROM unnest(\(projects.map(\.appID))::bigint[], \(projects.map(\.projectID))::text[]) AS p(app_id, project_id)
         WHERE a.id = p.app_id AND a.fcm_project_id = p.project_id
           AND a.fcm_proven_project_id IS DISTINCT FROM p.project_id
        """
    }

    /// A final or retry state for one delivery.
    struct Result: Sendable {
        let lease: Lease
        let jobID: Int64
        let deviceID: Int64
        /// Pending: a retry.
        let status: DeliveryStatus
        let errorCode: DeliveryErrorCode?
        let errorMessage: String?
        let messageID: String?
        let attempted: Bool
        let nextAttempt: Date

        init(
            _ claimed: Claimed, status: DeliveryStatus, errorCode: DeliveryErrorCode?, errorMessage: String?, messageID: String?,
            attempted: Bool,
            nextAttempt: Date
        ) {
            lease = claimed.lease
            jobID = claimed.jobID
            deviceID = claimed.deviceID
            self.status = status
            // What FCM, Google or a proxy said, as the log can hold it (a NUL would refuse the write).
            self.errorCode = errorCode.map { DeliveryErrorCode(rawValue: $0.rawValue.storable()) }
            self.errorMessage = errorMessage?.storable()
            self.messageID = messageID?.storable()
            self.attempted = attempted
            self.nextAttempt = nextAttempt
        }
    }

    /// The most results one statement writes: large enough to be cheap per row, small enough to
    /// stay on primary-key lookups.
    static let resultsPerStatement = 2000

    /// Writes what the send loop decided, in one transaction: device deactivations, results (a
    /// statement per `resultsPerStatement`, the last also deleting the chunks whose every device
    /// now has its row), proven projects, and the jobs those results fail. The failure that ends
    /// a job thus commits with the results that caused it: another worker never sees the results
    /// without the failure (and completes the job meanwhile). Returns the jobs this write ended,
    /// not those another worker or an operator ended first.
    /// Results for leases this worker no longer holds are dropped (another worker took over).
    /// A retry of a job that is no longer running becomes final.
    func write(_ batch: Outbox.Batch) async throws -> Set<Int64> {
        // Retried rows' jobs' span, read once for both tries below.
        let heldJobs = Set(batch.results.compactMap { if case .row = $0.lease { $0.jobID } else { nil } })
        let held = heldJobs.isEmpty ? CreationSpan.empty : try await creationSpan(of: JobsSpanStatement(Array(heldJobs))) ?? .empty
        // A refused write is undone as a whole and written again allowing for what refused it.
        var allowing: RecordAllowances = []
        while true {
            do {
                return try await write(batch, allowing: allowing, heldRowsCreated: held)
            } catch {
                switch DatabaseErrorText.sqlState(error) {
                case .uniqueViolation? where !allowing.contains(.existingRows):
                    allowing.insert(.existingRows)
                case .foreignKeyViolation? where !allowing.contains(.deletedDevices):
                    logger.warning(
                        "a device was deleted while its delivery was in flight: its result is not recorded",
                        metadata: ["push.error": "\(DatabaseErrorText.describe(error))"])
                    allowing.insert(.deletedDevices)
                default:
                    throw error
                }
            }
        }
    }

    /// What refused a write's first try, for the next to allow. Both are rare, so the usual
    /// statement pays for neither.
    struct RecordAllowances: OptionSet {
        let rawValue: Int
        /// A device of a taken-over chunk whose row the previous holder wrote meanwhile (a
        /// unique violation): that row is kept.
        static let existingRows = RecordAllowances(rawValue: 1)
        /// A device deleted since it was claimed (a foreign-key violation). Devices are
        /// deactivated, never deleted, but an operator's DELETE must not stop the writer: the
        /// device's result is dropped.
        static let deletedDevices = RecordAllowances(rawValue: 2)
    }

    private func write(_ batch: Outbox.Batch, allowing: RecordAllowances, heldRowsCreated held: CreationSpan) async throws -> Set<Int64> {
        if batch.deactivations.isEmpty && batch.provenProjects.isEmpty && batch.jobFailures.isEmpty {
            // Nothing but jobs to check (an audience found empty): no statement at all.
            if batch.results.isEmpty && batch.finishedChunks.isEmpty { return [] }
            // Results alone, in one statement (most batches, and every single's): atomic as it
            // is, without BEGIN and COMMIT's two round trips.
            if batch.results.count <= Self.resultsPerStatement {
                try await run(
                    recordStatement(
                        batch.results[...], finishedChunks: batch.finishedChunks, allowing: allowing,
                        heldRowsCreated: held))
                return []
            }
        }
        return try await DatabaseTransaction.run(client, logger: logger) { transaction in
            if !batch.deactivations.isEmpty {
                try await transaction.query(
                    """
                    UPDATE push_devices v
                       SET is_active = false, deactivated_at = now(), deactivation_reason = r.reason, updated_at = now()
                      FROM unnest(\(batch.deactivations.map(\.deviceID))::bigint[], \(batch.deactivations.map(\.reason))::text[]) AS r(id, reason)
                     WHERE v.id = r.id AND v.is_active
                    """)
            }
            let results = batch.results
            if !results.isEmpty || !batch.finishedChunks.isEmpty {
                var start = 0
                repeat {
                    let end = min(start + Self.resultsPerStatement, results.count)
                    let chunks = end == results.count ? batch.finishedChunks : []
                    try await transaction.query(
                        recordStatement(
                            results[start..<end], finishedChunks: chunks, allowing: allowing,
                            heldRowsCreated: held))
                    start = end
                } while start < results.count
            }
            if !batch.provenProjects.isEmpty {
                try await transaction.query(proveStatement(batch.provenProjects))
            }
            var ended: Set<Int64> = []
            for (job, reason) in batch.jobFailures
            where try await JobDirectory.end(job, .failed(reason: reason), in: transaction) {
                ended.insert(job)
            }
            return ended
        }
    }

    /// Rows held by their own lease are updated; they are found by primary key (`d.id IN held`),
    /// and the lease is compared as a join column, never as a constant: statistics taken between
    /// campaigns say no row has a lease owner, and with `d.lease_owner = 'me'` the planner expected
    /// one row, scanned the whole table for it and then rescanned the results once per row found
    /// (seconds per batch). Devices of chunks get their row inserted; a finished chunk is deleted
    /// in the same statement, only while this worker holds it.
    ///
    /// The insert is plain unless `allowing` says otherwise: `ON CONFLICT DO NOTHING` costs a
    /// speculative insertion per row (~2.5 µs of the database's CPU per delivery, measured), and
    /// a row can already exist only after a chunk was taken over, when its previous holder's late
    /// results and the new holder's race; a device can be missing only after a DELETE, which the
    /// registry never does. The caller writes those rare batches again allowing for them.
    ///
    /// `heldRowsCreated` spans the held rows' jobs: the update is planned for those days'
    /// partitions alone, and for none when the batch holds no row (a campaign's first attempts).
    func recordStatement(
        _ results: ArraySlice<Result>, finishedChunks: [Int64], allowing: RecordAllowances, heldRowsCreated held: CreationSpan
    ) -> PostgresQuery {
        var rowIDs: [Int64] = []
        var jobs: [Int64] = []
        var devices: [Int64] = []
        for result in results {
            if case .row(let id) = result.lease { rowIDs.append(id) } else { rowIDs.append(0) }
            jobs.append(result.jobID)
            devices.append(result.deviceID)
        }
        let heldRows = rowIDs.filter { $0 != 0 }
        return """
            WITH r AS (
                -- A retry of a job that ended meanwhile is never tried again: skipped like the job's other
                -- pending deliveries when it was cancelled, failed with the job's reason when it failed.
                SELECT r.row_id, r.lease_owner, r.job_id, r.device_id, r.attempted, r.next_attempt, NULLIF(r.message_id, '') AS message_id,
                       CASE WHEN r.status <> 'pending' OR j.status = 'running' THEN r.status
                            WHEN j.status = 'cancelled' THEN \(DeliveryStatus.skipped) ELSE \(DeliveryStatus.failed) END AS status,
                       CASE WHEN r.status <> 'pending' OR j.status = 'running' THEN NULLIF(r.code, '')
                            WHEN j.status = 'cancelled' THEN \(DeliveryErrorCode.cancelled) ELSE \(DeliveryErrorCode.jobFailed) END AS code,
                       -- A JOB_ENDED mark's message, if any, goes on after the ending's (a taken-over chunk's
                       -- "may have been sent").
                       CASE WHEN r.status <> 'pending' OR j.status = 'running' THEN NULLIF(r.message, '')
                            WHEN r.code = \(DeliveryErrorCode.jobEnded) THEN
                                 concat_ws('; ', CASE WHEN j.status = 'cancelled' THEN \(JobDirectory.cancelledMessage) ELSE j.last_error END,
                                           NULLIF(r.message, ''))
                            WHEN j.status = 'cancelled' THEN \(JobDirectory.cancelledMessage)
                            ELSE COALESCE(j.last_error, NULLIF(r.message, '')) END AS message,
                       j.created_at AS job_created_at, j.app_id
                  FROM unnest(\(rowIDs)::bigint[], \(jobs)::bigint[], \(devices)::bigint[], \(results.map(\.status))::text[],
                              \(results.map { $0.errorCode?.rawValue ?? "" })::text[], \(results.map { $0.errorMessage ?? "" })::text[],
                              \(results.map { $0.messageID ?? "" })::text[], \(results.map { $0.attempted ? 1 : 0 })::int[],
                              \(results.map(\.nextAttempt))::timestamptz[], \(Array(repeating: worker, count: results.count))::text[])
                       AS r(row_id, job_id, device_id, status, code, message, message_id, attempted, next_attempt, lease_owner)
                  JOIN push_jobs j ON j.id = r.job_id),
            held(id) AS (SELECT unnest(\(heldRows)::bigint[])),
            updated AS (
                UPDATE push_deliveries d
                   SET status = r.status, error_code = r.code, error_message = r.message, fcm_message_id = r.message_id,
                       attempts = d.attempts + r.attempted, next_attempt_at = r.next_attempt, lease_owner = NULL, updated_at = now()
                  FROM r
                 WHERE d.id IN (SELECT id FROM held) AND d.id = r.row_id AND d.job_created_at = r.job_created_at
                   AND d.job_created_at BETWEEN \(held.earliest) AND \(held.latest)
                   AND d.lease_owner = r.lease_owner),
            finished AS (
                DELETE FROM push_job_chunks WHERE id = ANY(\(finishedChunks)::bigint[]) AND lease_owner = \(worker))
            INSERT INTO push_deliveries (job_id, device_id, status, error_code, error_message, fcm_message_id, attempts, next_attempt_at,
                                         job_created_at, app_id)
            SELECT r.job_id, r.device_id, r.status, r.code, r.message, r.message_id, r.attempted, r.next_attempt, r.job_created_at,
                   r.app_id
              FROM r WHERE r.row_id = 0
            \(unescaped: allowing.contains(.deletedDevices) ? "AND EXISTS (SELECT FROM push_devices v WHERE v.id = r.device_id)" : "")
            \(unescaped: allowing.contains(.existingRows) ? "ON CONFLICT ON CONSTRAINT push_deliveries_job_device_key DO NOTHING" : "")
            """
    }

    /// Keeps this worker's leases alive while their sends are in flight.
    func heartbeat(_ leases: [Lease]) async throws {
        let (rows, chunks) = Self.split(leases)
        if !rows.isEmpty {
            try await run(
                """
                UPDATE push_deliveries SET next_attempt_at = now() + make_interval(secs => \(lease.inSeconds))
                 WHERE id = ANY(\(rows)) AND lease_owner = \(worker) AND status = 'pending'
                """)
        }
        if !chunks.isEmpty {
            try await run(
                """
                UPDATE push_job_chunks SET lease_until = now() + make_interval(secs => \(lease.inSeconds))
                 WHERE id = ANY(\(chunks)) AND lease_owner = \(worker)
                """)
        }
    }

    /// Gives up leases held for deliveries this worker will not send (claimed, unsent at a shutdown):
    /// due at once for the next worker instead of after the lease. A released chunk is taken
    /// over for its devices without a row, so its sent devices' results must be written first.
    /// A released chunk's owner is empty: nobody holds it, and nothing of it was in flight.
    func release(_ leases: [Lease]) async throws {
        let (rows, chunks) = Self.split(leases)
        if !rows.isEmpty {
            try await run(
                """
                UPDATE push_deliveries SET lease_owner = NULL, next_attempt_at = now()
                 WHERE id = ANY(\(rows)) AND lease_owner = \(worker) AND status = 'pending'
                """)
        }
        if !chunks.isEmpty {
            try await run(
                "UPDATE push_job_chunks SET lease_until = now(), lease_owner = '' WHERE id = ANY(\(chunks)) AND lease_owner = \(worker)")
        }
    }

    private static func split(_ leases: [Lease]) -> (rows: [Int64], chunks: [Int64]) {
        var rows: [Int64] = []
        var chunks: [Int64] = []
        for lease in leases {
            switch lease {
            case .row(let id): rows.append(id)
            case .chunk(let id): chunks.append(id)
            }
        }
        return (rows, chunks)
    }

    /// Marks jobs completed once their audience is expanded and nothing is pending or in flight.
    /// Run after the results' transaction commits, never inside it: two workers writing a job's
    /// last results at once would each see the other's as still pending, and neither complete it.
    func completeFinished(_ jobIDs: [Int64]) async throws {
        guard !jobIDs.isEmpty, let span = try await creationSpan(of: CompletableJobsSpanStatement(jobIDs)) else { return }
        try await run(completionStatement(jobIDs, jobsCreated: span))
    }

    /// The completion's SQL, apart so that a test can check its plan.
    func completionStatement(_ jobIDs: [Int64], jobsCreated span: CreationSpan) -> PostgresQuery {
        """
        UPDATE push_jobs j SET status = 'completed', finished_at = now()
         WHERE j.id = ANY(\(jobIDs)) AND j.status = 'running' AND j.audience_complete
           AND j.created_at BETWEEN \(span.earliest) AND \(span.latest)
           AND NOT EXISTS (SELECT 1 FROM push_deliveries d
                            WHERE d.job_id = j.id AND d.job_created_at = j.created_at AND d.status = 'pending'
                              AND d.job_created_at BETWEEN \(span.earliest) AND \(span.latest))
           AND NOT EXISTS (SELECT 1 FROM push_job_chunks c WHERE c.job_id = j.id)
        """
    }

    /// Queue depth (pending deliveries, devices in chunks without a row yet, and due audiences
    /// not expanded yet) and the age of the oldest due job, for /metrics.
    /// `took`: the server's time for the count, without the wait for a connection (which after a
    /// database outage would hold the next measurement back as if counting were expensive).
    func depth() async throws -> (pending: Int, oldestDueSeconds: Double, took: Duration) {
        let rows = try await run(
            """
            SELECT ((SELECT count(*) FROM push_deliveries WHERE status = 'pending')
                    + (SELECT COALESCE(sum(push_job_in_flight(job_id)), 0) FROM (SELECT DISTINCT job_id FROM push_job_chunks) c)
                    + (SELECT COALESCE(sum(push_job_unexpanded(status, audience_complete, app_id, user_ids, platforms, audience_cursor)), 0)
                         FROM push_jobs WHERE status IN ('queued', 'running') AND NOT audience_complete AND send_at <= now()))::int,
                   COALESCE((SELECT extract(epoch FROM now() - min(send_at)) FROM push_jobs
                              WHERE status IN ('queued', 'running') AND send_at <= now()), 0)::float8,
                   extract(epoch FROM clock_timestamp() - statement_timestamp())::float8
            """)
        guard let row = rows.first else { return (0, 0, .zero) }
        let (pending, age, took) = try row.decode((Int, Double, Double).self)
        return (pending, age, .milliseconds(Int64(took * 1000)))
    }

    /// The creation times of some jobs, widened by a second each way (a `Date` holds a
    /// timestamp's microseconds only to within rounding). push_deliveries is partitioned by its
    /// job's creation day: a statement that binds this span as `job_created_at BETWEEN` values is
    /// planned for those days' partitions alone, where a bound by join or subquery is planned for
    /// every day kept (9–19 ms for the claim, the takeover and the completion, 1.4 ms for the
    /// update of held rows, at 39 partitions, on every claim and every write).
    struct CreationSpan: Sendable {
        let earliest: Date
        let latest: Date

        init(earliest: Date, latest: Date) {
            self.earliest = earliest.addingTimeInterval(-1)
            self.latest = latest.addingTimeInterval(1)
        }

        private init(bounds earliest: Date, _ latest: Date) {
            self.earliest = earliest
            self.latest = latest
        }

        /// No job at all: its bounds contradict each other, and PostgreSQL (its default
        /// `constraint_exclusion = partition`) plans no partition for a statement bound by it.
        static let empty = CreationSpan(bounds: Date(timeIntervalSince1970: 1), Date(timeIntervalSince1970: 0))
    }

    /// The span of the jobs a `min(created_at), max(created_at)` statement finds; nil for none.
    func creationSpan(of statement: some QueueStatement) async throws -> CreationSpan? {
        guard let row = try await run(statement).first else { return nil }
        let (earliest, latest) = try row.decode((Date?, Date?).self)
        guard let earliest, let latest else { return nil }
        return CreationSpan(earliest: earliest, latest: latest)
    }

    /// The running jobs' span: every claimable delivery's lies in it.
    func runningJobsSpan() async throws -> CreationSpan? {
        try await creationSpan(of: RunningJobsSpanStatement())
    }

    /// Whether the database answers, within `limit` (what ``DatabaseWatch`` asks).
    func ping(within limit: Duration) async throws {
        try await DatabaseDeadline(limit: limit).run { _ = try await run("SELECT 1") }
    }

    /// Every statement goes through ``DatabaseStatement``: `PostgresClient.query` can leave one
    /// unanswered, and its caller waiting for good, on a connection that has just closed.
    @discardableResult
    private func run(_ query: PostgresQuery) async throws -> PostgresQueryResult {
        try await DatabaseStatement.run(query, on: client, logger: logger)
    }

    private func run(_ statement: some QueueStatement) async throws -> [PostgresRow] {
        try await DatabaseStatement.run(statement, on: client, pooler: pooler, logger: logger)
    }
}
