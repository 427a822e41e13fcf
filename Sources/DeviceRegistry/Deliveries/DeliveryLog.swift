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
        case attempts, createdAt, updatedAt
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
    /// One device's deliveries (`push_devices.id`), read through its index of deliveries by device.
    public var deviceID: Int64?

    public init(
        jobID: Int64? = nil, userID: Int64? = nil, appCode: String? = nil, status: DeliveryStatus? = nil, since: Date? = nil,
        deviceID: Int64? = nil
    ) {
        self.jobID = jobID
        self.userID = userID
        self.appCode = appCode
        self.status = status
        self.since = since
        self.deviceID = deviceID
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
        var jobDay: Range<Date>?
        if let job = filter.jobID {
            guard let day = try await creationDay(ofJob: job) else { return }
            jobDay = day
        }
        let rows = try await client.query(statement(filter, jobDay: jobDay, below: cursor, limit: limit), logger: logger)
        typealias Row = (Int64, Int64, Int64, Int64, String, Platform, String, DeliveryStatus, String?, String?, String?, Int, Date, Date)
        for try await row in rows.decode(Row.self) {
            try await body(
                DeliveryRecord(
                    id: row.0, jobID: row.1, deviceID: row.2, userID: row.3, appCode: row.4, platform: row.5,
                    maskedToken: maskedToken(row.6), status: row.7, errorCode: row.8, errorMessage: row.9,
                    fcmMessageID: row.10, attempts: row.11, createdAt: row.12, updatedAt: row.13))
        }
    }

    /// The UTC day a job was created in: its rows' partition. Nil for no such job.
    func creationDay(ofJob job: Int64) async throws -> Range<Date>? {
        let rows = try await client.query(
            "SELECT date_trunc('day', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' FROM push_jobs WHERE id = \(job)", logger: logger)
        for try await start in rows.decode(Date.self) { return start..<start.addingTimeInterval(86_400) }
        return nil
    }

    /// The audit's SQL, apart so that a test can check its plan. A job's rows are read in its
    /// day's partition only: its creation day (``creationDay(ofJob:)``, whole seconds, which a
    /// `Date` carries exactly) is bound as a value, so the planner prunes the others before it
    /// plans (a subquery pruned them only as it ran: every partition planned, about 5 ms, and
    /// the job's rows estimated without its day's statistics: a job's failed deliveries were
    /// sorted, 111 ms, where the job's index walked back needs 1 ms). The other filters walk
    /// every partition's primary key back from the cursor.
    func statement(_ filter: DeliveryFilter, jobDay: Range<Date>?, below cursor: Int64?, limit: Int?) -> PostgresQuery {
        """
        SELECT d.id, d.job_id, d.device_id, v.user_id, a.code, v.platform, v.token, d.status, d.error_code,
               d.error_message, d.fcm_message_id, d.attempts, d.created_at, d.updated_at
          FROM push_deliveries d
          JOIN push_devices v ON v.id = d.device_id
          JOIN apps a ON a.id = v.app_id
         WHERE (\(filter.jobID)::bigint IS NULL
                OR (d.job_id = \(filter.jobID) AND d.job_created_at >= \(jobDay?.lowerBound) AND d.job_created_at < \(jobDay?.upperBound)))
           AND (\(filter.userID)::bigint IS NULL OR v.user_id = \(filter.userID))
           AND (\(filter.appCode)::text IS NULL OR v.app_id = (SELECT id FROM apps WHERE code = \(filter.appCode)))
           AND (\(filter.status)::text IS NULL OR d.status = \(filter.status))
           AND (\(filter.since)::timestamptz IS NULL OR d.updated_at >= \(filter.since))
           AND (\(filter.deviceID)::bigint IS NULL OR d.device_id = \(filter.deviceID))
           AND (\(cursor)::bigint IS NULL OR d.id < \(cursor))
         ORDER BY d.id DESC
         LIMIT \(limit)
        """
    }
}
