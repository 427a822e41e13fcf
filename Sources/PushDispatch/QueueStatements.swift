import DeviceRegistry
import PostgresNIO

/// A statement of the queue's that reads a few jobs, or a few users' devices, by index: the same
/// text every call, and cheap to run, so that parsing and planning it each time was most of its
/// cost (three quarters of PostgreSQL's time for a single notification, with
/// `pg_stat_statements`). Prepared once per connection, it is parsed once and, after
/// PostgreSQL's five custom plans, may run on one generic plan. What never changes is written into
/// the text rather than bound, so that a generic plan, where PostgreSQL finds it no costlier,
/// reads by the index the values would.
/// Statements whose plan depends on their values stay unnamed: those bound to days of
/// push_deliveries (``DeliveryQueue/CreationSpan``) and the expansion of a whole app's audience
/// or of many users'.
protocol QueueStatement: PostgresPreparedStatement where Row == PostgresRow {
    var bindings: PostgresBindings { get }
}

extension QueueStatement {
    func makeBindings() -> PostgresBindings { bindings }
    func decodeRow(_ row: PostgresRow) -> PostgresRow { row }
}

/// A statement whose one value is a list of job ids.
protocol JobListStatement: QueueStatement {
    init(bindings: PostgresBindings)
}

extension JobListStatement {
    static var bindingDataTypes: [PostgresDataType] { [.int8Array] }

    init(_ jobs: [Int64]) {
        var bindings = PostgresBindings(capacity: 1)
        bindings.append(jobs)
        self.init(bindings: bindings)
    }
}

/// Which of some jobs are still running.
struct RunningJobsStatement: JobListStatement {
    static let sql = "SELECT id FROM push_jobs WHERE id = ANY($1) AND status = 'running'"
    let bindings: PostgresBindings
}

/// The creation span (`min(created_at), max(created_at)`) of the running jobs: every claimable
/// delivery's job is among them.
struct RunningJobsSpanStatement: QueueStatement {
    static let sql = "SELECT min(created_at), max(created_at) FROM push_jobs WHERE status = 'running'"
    let bindings = PostgresBindings()
}

/// The creation span of some jobs.
struct JobsSpanStatement: JobListStatement {
    static let sql = "SELECT min(created_at), max(created_at) FROM push_jobs WHERE id = ANY($1)"
    let bindings: PostgresBindings
}

/// The creation span of those of some jobs that may be complete: running, audience expanded.
struct CompletableJobsSpanStatement: JobListStatement {
    static let sql = """
        SELECT min(created_at), max(created_at) FROM push_jobs
         WHERE id = ANY($1) AND status = 'running' AND audience_complete
        """
    let bindings: PostgresBindings
}

/// The creation span of the jobs of chunks whose lease ran out.
struct ExpiredChunksSpanStatement: QueueStatement {
    static let sql = """
        SELECT min(j.created_at), max(j.created_at)
          FROM push_job_chunks c JOIN push_jobs j ON j.id = c.job_id WHERE c.lease_until <= now()
        """
    let bindings = PostgresBindings()
}

/// Due, unexpired jobs whose audience is not fully expanded, by priority then due time, apart
/// from some apps' and some jobs; only one priority's when given.
struct UnexpandedJobsStatement: QueueStatement {
    static let sql = """
        SELECT j.id, j.app_id, j.user_ids, j.platforms, j.priority, a.max_sends_per_second IS NOT NULL
          FROM push_jobs j JOIN apps a ON a.id = j.app_id
         WHERE j.status IN ('queued', 'running') AND NOT j.audience_complete AND j.send_at <= now()
           AND (j.expires_at IS NULL OR j.expires_at > now())
           AND ($1::text IS NULL OR j.priority = $1::text)
           AND NOT (j.app_id = ANY($2::bigint[])) AND NOT (j.id = ANY($3::bigint[]))
         ORDER BY push_priority_rank(j.priority), j.send_at, j.id
         LIMIT $4
        """
    static let bindingDataTypes: [PostgresDataType] = [.text, .int8Array, .int8Array, .int4]
    let bindings: PostgresBindings

    init(priority: JobPriority?, excludingApps paused: [Int64], excludingJobs ended: [Int64], limit: Int) {
        var bindings = PostgresBindings(capacity: 4)
        bindings.append(priority?.rawValue)
        bindings.append(paused)
        bindings.append(ended)
        bindings.append(Int32(clamping: limit))
        self.bindings = bindings
    }
}

/// What a delivery's send needs of its job and app.
struct JobDetailsStatement: JobListStatement {
    static let sql = """
        SELECT j.id, j.app_id, a.code, j.message::text, j.validate_only,
               a.fcm_project_id, a.fcm_client_email, a.fcm_private_key, a.fcm_private_key_id,
               COALESCE(a.fcm_proven_project_id = a.fcm_project_id, false), j.priority, j.expires_at
          FROM push_jobs j JOIN apps a ON a.id = j.app_id
         WHERE j.id = ANY($1)
        """
    let bindings: PostgresBindings
}

/// The next devices of a job's audience, leased to a worker as chunks of
/// ``DeliveryQueue/chunkSize``; the job's cursor moved past them. One text for an audience of
/// users, prepared for a few users (their devices by the user index, whatever the values), and
/// one for a whole app's, unnamed: planned for its cursor and size each time (see
/// `QueuePlanTests.theExpansionReadsTheAppsDevicesInOrderFromTheCursor`).
struct AudienceExpansionStatement: QueueStatement {
    static let sql = text(byUsers: true)
    /// The most users whose expansion is prepared. The generic plan reads and sorts every
    /// device of the users to take each share: for thousands of users, taking the app's
    /// devices in id order from the cursor may cost less, and only planning for the values knows.
    static let preparedUsers = 100
    static let bindingDataTypes: [PostgresDataType] = [.int8, .int8, .textArray, .int4, .text, .float8, .int8Array]
    /// A whole app's audience; its bindings are the first six of an audience of users'.
    static let appSQL = text(byUsers: false)
    let bindings: PostgresBindings

    init(job: Int64, app: Int64, users: [Int64]?, platforms: [String]?, limit: Int, worker: String, lease: Duration) {
        var bindings = PostgresBindings(capacity: 7)
        bindings.append(job)
        bindings.append(app)
        bindings.append(platforms)
        bindings.append(Int32(clamping: limit))
        bindings.append(worker)
        bindings.append(lease.inSeconds)
        if let users { bindings.append(users) }
        self.bindings = bindings
    }

    private static func text(byUsers: Bool) -> String {
        """
        -- The job row is locked: workers expanding one job take turns, each from the cursor the
        -- previous one left (READ COMMITTED re-reads a row it waited for).
        WITH job AS (
            SELECT audience_cursor FROM push_jobs
             WHERE id = $1 AND status IN ('queued', 'running') AND NOT audience_complete
               AND (expires_at IS NULL OR expires_at > now())
               FOR UPDATE),
        picked AS (
            SELECT d.id, d.token, d.token_type, (row_number() OVER (ORDER BY d.id) - 1) / \(DeliveryQueue.chunkSize) AS part
              FROM push_devices d
             WHERE d.app_id = $2 AND d.is_active AND d.id > (SELECT audience_cursor FROM job)\(byUsers ? "\n       AND d.user_id = ANY($7::bigint[])" : "")
               AND ($3::text[] IS NULL OR d.platform = ANY($3::text[]))
             ORDER BY d.id
             LIMIT $4::int),
        chunks AS (
            INSERT INTO push_job_chunks (job_id, device_ids, lease_owner, lease_until)
            SELECT $1, array_agg(id ORDER BY id), $5::text, now() + make_interval(secs => $6::float8)
              FROM picked GROUP BY part
            RETURNING id, device_ids),
        advanced AS (
            UPDATE push_jobs
               SET status = 'running', started_at = COALESCE(started_at, now()),
                   audience_cursor = COALESCE((SELECT max(id) FROM picked), audience_cursor),
                   audience_complete = (SELECT count(*) FROM picked) < $4::int
             WHERE id = $1 AND EXISTS (SELECT FROM job)
            RETURNING audience_complete)
        SELECT c.id, p.id, p.token, p.token_type, (SELECT audience_complete FROM advanced)
          FROM chunks c CROSS JOIN LATERAL unnest(c.device_ids) AS dev(id) JOIN picked p ON p.id = dev.id
        """
    }
}
