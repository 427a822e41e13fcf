import Foundation
import Logging
import PostgresNIO

/// One row of the audit log as admins see it: the worker's `push_deliveries` row with its
/// device's user, app and platform, and the token masked. Encoded as the HTTP API and
/// `pushctl deliveries --format json` show it.
public struct DeliveryRecord: Sendable, Equatable, Encodable {
    public let id: Int64
    public let jobID: Int64
    public let deviceID: Int64
    public let userID: Int64
    public let appCode: String
    public let platform: Platform
    /// The device token as ``maskedToken(_:)`` shows it.
    public let maskedToken: String
    public let status: DeliveryStatus
    public let errorCode: String?
    public let errorMessage: String?
    public let fcmMessageID: String?
    public let attempts: Int
    public let createdAt: Date
    public let updatedAt: Date
    /// Of a dry run (FCM's `validate_only`): FCM checked the message and delivered nothing, so
    /// `sent` means accepted, not delivered.
    public let dryRun: Bool

    enum CodingKeys: String, CodingKey {
        case id
        case jobID = "jobId"
        case deviceID = "deviceId"
        case userID = "userId"
        case appCode, platform
        case maskedToken = "token"
        case status
        case errorCode, errorMessage
        case fcmMessageID = "fcmMessageId"
        case attempts, createdAt, updatedAt, dryRun
    }
}

/// Which deliveries to read; every field narrows, nil means any.
public struct DeliveryFilter: Sendable, Equatable {
    public var jobID: Int64?
    public var userID: Int64?
    public var appCode: String?
    public var status: DeliveryStatus?
    /// Deliveries changed at or after this time.
    public var since: Date?

    public init(
        jobID: Int64? = nil, userID: Int64? = nil, appCode: String? = nil, status: DeliveryStatus? = nil, since: Date? = nil
    ) {
        self.jobID = jobID
        self.userID = userID
        self.appCode = appCode
        self.status = status
        self.since = since
    }
}

/// Reads the delivery audit log, newest first, by keyset: a page ends at a delivery id and the
/// next one starts below it, so rows inserted meanwhile never shift a page and nothing is read
/// twice. (Ids are taken at insert, not commit: a row committing late below a page already read
/// is missed by that walk.)
public struct DeliveryLog: Sendable {
    let client: PostgresClient
    let logger: Logger

    public init(client: PostgresClient, logger: Logger) {
        self.client = client
        self.logger = logger
    }

    public struct Page: Sendable, Equatable {
        public let deliveries: [DeliveryRecord]
        /// The id to pass as `below` for the next page; nil on the last page.
        public let nextCursor: Int64?

        public init(deliveries: [DeliveryRecord], nextCursor: Int64?) {
            self.deliveries = deliveries
            self.nextCursor = nextCursor
        }
    }

    public func page(_ filter: DeliveryFilter, below cursor: Int64?, limit: Int) async throws -> Page {
        var deliveries: [DeliveryRecord] = []
        try await each(filter, below: cursor, limit: limit + 1) { deliveries.append($0) }
        guard deliveries.count > limit else { return Page(deliveries: deliveries, nextCursor: nil) }
        deliveries.removeLast()
        return Page(deliveries: deliveries, nextCursor: deliveries.last?.id)
    }

    /// The app is matched by its id, looked up first, not by the joined `apps.code`: `apps` is too
    /// small for autovacuum ever to analyze it, and without statistics the planner takes an app's
    /// code for a rare match and sorts all of the app's deliveries (seconds at a million) instead
    /// of walking the primary key back to the page it needs.
    ///
    /// Calls `body` for each matching delivery as the rows arrive, without holding them: a
    /// whole campaign's log streams through in constant memory. The next rows are read only as
    /// `body` returns, so a body that awaits a slow reader (an HTTP download) holds the query back
    /// instead of buffering what it has not written yet.
    public func each(
        _ filter: DeliveryFilter, below cursor: Int64? = nil, limit: Int? = nil,
        _ body: (DeliveryRecord) async throws -> Void
    ) async throws {
        guard let query = try await statement(filter, below: cursor, limit: limit) else { return }
        try await DatabaseStatement.stream(query, on: client, logger: logger) { rows in
            for try await row in rows.decode(Row.self) { try await body(Self.record(row)) }
        }
    }

    /// The audit's SQL with the days it can read looked up first and bound as values (see
    /// ``statement(_:days:below:limit:)``); nil when no row can match: no such job, or nothing
    /// changed since.
    func statement(_ filter: DeliveryFilter, below cursor: Int64?, limit: Int?) async throws -> PostgresQuery? {
        var days = Days(before: Days.aDayFromNow())
        if let job = filter.jobID {
            guard let day = try await creationDay(ofJob: job) else { return nil }
            days.job = day
        }
        if let since = filter.since {
            guard let day = try await firstDayChanged(since: since) else { return nil }
            days.changedFrom = day
        }
        return statement(filter, days: days, below: cursor, limit: limit)
    }

    /// The days of job creation (the partitions) a read is bound to.
    struct Days {
        /// Later than any job's creation: a day from now. The days ahead, created in advance and
        /// empty, are left out of the plan (6 of a log's 39 partitions, each planned otherwise).
        var before: Date

        /// ``before`` for a read starting now.
        static func aDayFromNow() -> Date { Date().addingTimeInterval(86_400) }
        /// The job's day, with a job filter.
        var job: Range<Date>?
        /// The first day with a row changed since the filter's time, with `since`.
        var changedFrom: Date?
    }

    /// Each device's newest `each` deliveries, in one statement: planned once, where a read per
    /// device planned every day's partition again (about 5 ms each with 39 of them).
    public func newest(ofDevices devices: [Int64], each: Int) async throws -> [Int64: [DeliveryRecord]] {
        var newest: [Int64: [DeliveryRecord]] = [:]
        guard !devices.isEmpty else { return newest }
        let rows = try await DatabaseStatement.run(
            newestStatement(ofDevices: devices, each: each, before: Days.aDayFromNow()), on: client, logger: logger)
        for row in rows {
            let record = Self.record(try row.decode(Row.self))
            newest[record.deviceID, default: []].append(record)
        }
        return newest
    }

    /// The columns every statement here selects, in order.
    typealias Row = (Int64, Int64, Int64, Int64, String, Platform, String, DeliveryStatus, String?, String?, String?, Int, Date, Date, Bool)

    static func record(_ row: Row) -> DeliveryRecord {
        DeliveryRecord(
            id: row.0, jobID: row.1, deviceID: row.2, userID: row.3, appCode: row.4, platform: row.5,
            maskedToken: maskedToken(row.6), status: row.7, errorCode: row.8, errorMessage: row.9,
            fcmMessageID: row.10, attempts: row.11, createdAt: row.12, updatedAt: row.13, dryRun: row.14)
    }

    /// The first UTC day of job creation (a partition) with a delivery changed at or after
    /// `since`; nil when none was.
    func firstDayChanged(since: Date) async throws -> Date? {
        let rows = try await DatabaseStatement.run("SELECT push_first_day_changed_since(\(since))", on: client, logger: logger)
        return try rows.first?.decode(Date?.self)
    }

    /// The UTC day a job was created in: its rows' partition. Nil for no such job.
    func creationDay(ofJob job: Int64) async throws -> Range<Date>? {
        let rows = try await DatabaseStatement.run(
            "SELECT date_trunc('day', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' FROM push_jobs WHERE id = \(job)", on: client,
            logger: logger)
        guard let start = try rows.first?.decode(Date.self) else { return nil }
        return start..<start.addingTimeInterval(86_400)
    }

    /// The audit's SQL. A job's rows are read in its day's partition only: its creation day
    /// (``creationDay(ofJob:)``, whole seconds, which a `Date` carries exactly) is bound as a
    /// value, so the planner prunes the others before it plans (a subquery pruned them only as it
    /// ran: every partition planned, about 5 ms, and the job's rows estimated without its day's
    /// statistics: a job's failed deliveries were sorted, 111 ms, where the job's index walked
    /// back needs 1 ms). Likewise `since` reads the days from the first with a row changed since
    /// (``firstDayChanged(since:)``): each earlier day's partition, all of it older, would
    /// otherwise be walked back to its end to find nothing (the planner, walking each partition
    /// in id order, cannot tell). The other filters walk every partition back from the cursor,
    /// by the app's index, the unsent rows' or the primary key.
    func statement(_ filter: DeliveryFilter, days: Days, below cursor: Int64?, limit: Int?) -> PostgresQuery {
        """
        SELECT d.id, d.job_id, d.device_id, v.user_id, a.code, v.platform, v.token, d.status, d.error_code,
               d.error_message, d.fcm_message_id, d.attempts, d.created_at, d.updated_at, j.validate_only
          FROM push_deliveries d
          JOIN push_devices v ON v.id = d.device_id
          JOIN apps a ON a.id = v.app_id
          JOIN push_jobs j ON j.id = d.job_id
         WHERE d.job_created_at < \(days.before)
           AND (\(filter.jobID)::bigint IS NULL
                OR (d.job_id = \(filter.jobID) AND d.job_created_at >= \(days.job?.lowerBound) AND d.job_created_at < \(days.job?.upperBound)))
           AND (\(filter.userID)::bigint IS NULL OR v.user_id = \(filter.userID))
           AND (\(filter.appCode)::text IS NULL OR d.app_id = (SELECT id FROM apps WHERE code = \(filter.appCode)))
           AND (\(filter.status)::text IS NULL OR d.status = \(filter.status))
           AND (\(filter.since)::timestamptz IS NULL OR (d.updated_at >= \(filter.since) AND d.job_created_at >= \(days.changedFrom)))
           AND (\(cursor)::bigint IS NULL OR d.id < \(cursor))
         ORDER BY d.id DESC
         LIMIT \(limit)
        """
    }

    /// ``newest(ofDevices:each:)``'s SQL: each device's index of deliveries walked back, `each`
    /// rows deep, in every partition but the days ahead (as ``Days/before``).
    func newestStatement(ofDevices devices: [Int64], each: Int, before: Date) -> PostgresQuery {
        """
        SELECT d.id, d.job_id, d.device_id, v.user_id, a.code, v.platform, v.token, d.status, d.error_code,
               d.error_message, d.fcm_message_id, d.attempts, d.created_at, d.updated_at, j.validate_only
          FROM unnest(\(devices)::bigint[]) AS p(device_id)
         CROSS JOIN LATERAL (SELECT * FROM push_deliveries d
                             WHERE d.device_id = p.device_id AND d.job_created_at < \(before)
                             ORDER BY d.id DESC LIMIT \(each)) d
          JOIN push_devices v ON v.id = d.device_id
          JOIN apps a ON a.id = v.app_id
          JOIN push_jobs j ON j.id = d.job_id
         ORDER BY d.device_id, d.id DESC
        """
    }
}
