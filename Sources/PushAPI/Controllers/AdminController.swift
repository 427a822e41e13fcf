import DeviceRegistry
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import ServiceSupport
import WireFormats

/// The service/admin endpoints, behind `AdminAuthenticator`: queueing notifications, job
/// progress and cancellation, and the delivery audit log. They read and write the same rows
/// as the worker and pushctl, through the same `JobDirectory` and `DeliveryLog`.
struct AdminController {
    /// Queueing and cancelling, on the primary.
    let jobs: @Sendable (Logger) -> JobDirectory
    /// Where the GET endpoints read (a standby with DATABASE_READ_URL); a listing read from a
    /// standby says how far behind it is (`replicaLagSeconds`).
    let audit: AuditSource
    let deadline: DatabaseDeadline

    func addRoutes(notifications: RouterGroup<APIRequestContext>, admin: RouterGroup<APIRequestContext>) {
        notifications.post(use: enqueue)
        admin.get("jobs", use: listJobs)
        admin.get("jobs/:id", use: job)
        admin.delete("jobs/:id", use: cancel)
        admin.post("jobs/:id/cancel", use: cancel)
        admin.get("deliveries", use: listDeliveries)
    }

    // MARK: POST /push/notifications

    struct NotificationRequest {
        let appCode: String
        let userIds: [Int64]?
        let campaign: Bool?
        let platforms: [String]?
        let message: JSONValue
        let idempotencyKey: String?
        let sendAt: String?
        let dryRun: Bool?
        let priority: String?
        let expiresAt: String?
        let ttlSeconds: Int64?

        enum Field: String, BodyField {
            case appCode, userIds, campaign, platforms, message, idempotencyKey, sendAt, dryRun, priority, expiresAt, ttlSeconds
        }

        /// Refuses a member it does not know (`JSONObject`): a misspelt field (`userIDs`,
        /// `send_at`) must not silently become a campaign or an immediate send.
        init(_ body: JSONObject<Field>) throws(APIError) {
            guard let appCode = try body.string(.appCode) else {
                throw body.members[Field.appCode.rawValue] == nil
                    ? .validation("appCode is required") : .validation("appCode must be a string")
            }
            self.appCode = appCode
            userIds = try body.integers(.userIds)
            campaign = try body.bool(.campaign)
            platforms = try body.strings(.platforms)
            message = try body.required(.message)
            idempotencyKey = try body.string(.idempotencyKey)
            sendAt = try body.string(.sendAt)
            dryRun = try body.bool(.dryRun)
            priority = try body.string(.priority)
            expiresAt = try body.string(.expiresAt)
            do {
                ttlSeconds = try body.integer(.ttlSeconds)
            } catch {
                throw .validation("ttlSeconds must be a positive integer")
            }
        }

        struct Validated {
            let priority: JobPriority?
            let sendAt: Date?
            let expiresAt: Date?
            let ttl: Duration?
        }

        /// Every rule the request must meet before it reaches SQL, each refusal naming its field;
        /// returns what it parsed.
        func validated() throws -> Validated {
            guard !appCode.isEmpty else { throw APIError.validation("appCode must not be empty") }
            switch (userIds, campaign ?? false) {
            case (nil, false): throw APIError.validation("give userIds, or \"campaign\": true for every device of the app")
            case (.some, true): throw APIError.validation("give either userIds or \"campaign\": true, not both")
            case (let userIDs?, false):
                guard (1...10_000).contains(userIDs.count) else { throw APIError.validation("userIds must hold 1 to 10000 user ids") }
                if let index = userIDs.firstIndex(where: { $0 <= 0 }) {
                    throw APIError.validation("userIds.\(index) must be a positive integer")
                }
                if platforms != nil { throw APIError.validation("platforms applies to campaigns only") }
            case (nil, true): break
            }
            if let platforms {
                guard !platforms.isEmpty else { throw APIError.validation("platforms must not be empty (leave it out for all)") }
                if let index = platforms.firstIndex(where: { Platform(rawValue: $0) == nil }) {
                    throw APIError.validation("platforms.\(index) must be ios, android or web")
                }
            }
            guard case .object = message else { throw APIError.validation("message must be a JSON object") }
            if let path = message.pathHoldingNUL(from: "message") { throw APIError.holdsNUL(path) }
            // Counted as PostgreSQL counts them: code points, not grapheme clusters.
            if let key = idempotencyKey, !(1...200).contains(key.unicodeScalars.count) {
                throw APIError.validation("idempotencyKey must be 1 to 200 characters")
            }
            let jobPriority = try priority.map { text in
                guard let priority = JobPriority(rawValue: text) else {
                    throw APIError.validation("priority must be one of \(JobPriority.choiceList), not \"\(text.prefix(64))\"")
                }
                return priority
            }
            if expiresAt != nil, ttlSeconds != nil {
                throw APIError.validation("give expiresAt or ttlSeconds, not both")
            }
            if let ttlSeconds, ttlSeconds <= 0 {
                throw APIError.validation("ttlSeconds must be a positive integer")
            }
            if let ttlSeconds, ttlSeconds > JobDirectory.longestTTL.components.seconds {
                throw APIError.validation("ttlSeconds must be at most \(JobDirectory.longestTTL.components.seconds) (ten years)")
            }
            func time(_ text: String?, _ field: String) throws -> Date? {
                try text.map { text in
                    do { return try ISO8601Time.parse(text, field: field) } catch { throw APIError.validation("\(error)") }
                }
            }
            return Validated(
                priority: jobPriority, sendAt: try time(sendAt, "sendAt"), expiresAt: try time(expiresAt, "expiresAt"),
                ttl: ttlSeconds.map { .seconds($0) })
        }
    }

    /// Room for 10,000 user ids of any size and a 4 KiB message; the device routes keep 16 KiB.
    static let notificationBodyLimit = 256 * 1024

    struct JobCreated: Encodable {
        let jobId: Int64
    }

    @Sendable func enqueue(_ request: Request, context: APIRequestContext) async throws -> Response {
        let body = try NotificationRequest(
            await JSONBody.object(
                from: request, context: context, fields: NotificationRequest.Field.self,
                limit: Self.notificationBodyLimit))
        let job = try await queue(body, logger: context.logger)
        var response = JSONBody.response(JobCreated(jobId: job.id), status: .accepted)
        // As Stripe's API says it: the key's earlier job, nothing new queued.
        if job.queuedBefore { response.headers[Self.idempotentReplayed] = "true" }
        return response
    }

    static let idempotentReplayed = HTTPField.Name("Idempotent-Replayed")!

    /// Queues the job `body` asks for, or refuses it with the API's messages: the one path of
    /// POST /push/notifications and the console's compose page, so both refuse alike.
    func queue(_ body: NotificationRequest, logger: Logger) async throws -> EnqueuedJob {
        let checked = try body.validated()
        let message = String(decoding: WireJSON.encoded(body.message), as: UTF8.self)
        let jobs = self.jobs(logger)
        let job: EnqueuedJob
        let giveUpAt = ContinuousClock.now + deadline.limit
        do {
            job = try await deadline.run {
                try await jobs.enqueue(
                    appCode: body.appCode, userIDs: body.userIds, platforms: body.platforms, message: message,
                    idempotencyKey: body.idempotencyKey, sendAt: checked.sendAt, dryRun: body.dryRun ?? false,
                    priority: checked.priority, expiresAt: checked.expiresAt, ttl: checked.ttl, giveUpAt: giveUpAt)
            }
        } catch let rejected as EnqueueRejected {
            let field: String? =
                switch rejected.parameter {
                case .appCode: "appCode"
                case .expiry: body.expiresAt != nil ? "expiresAt" : "ttlSeconds"
                case nil: nil
                }
            throw APIError.validation(field.map { "\($0): \(rejected.description)" } ?? rejected.description)
        }
        logger.info(
            job.queuedBefore ? "job queued before with this idempotency key" : "job queued",
            metadata: [
                "push.job_id": "\(job.id)", "push.app": "\(body.appCode)",
                "push.audience": "\(body.userIds.map { "\($0.count) users" } ?? "campaign")",
            ])
        return job
    }

    // MARK: jobs

    struct JobList: Encodable {
        let jobs: [JobSummary]
        let replicaLag: ReplicaLag?

        enum CodingKeys: String, CodingKey { case jobs, replicaLagSeconds }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(jobs, forKey: .jobs)
            try container.encodeReplicaLag(replicaLag, forKey: .replicaLagSeconds)
        }
    }

    @Sendable func listJobs(_ request: Request, context: APIRequestContext) async throws -> Response {
        let query = try QueryParameters(request, allowed: ["status", "limit"])
        let status = try query.oneOf("status", JobStatus.self)
        let limit = try query.integer("limit", in: JobDirectory.listLimits) ?? 50
        let (audit, logger) = (self.audit, context.logger)
        let (found, lag) = try await deadline.run {
            async let lag = audit.lag(logger: logger)
            let found = try await JobDirectory(client: audit.client, logger: logger).list(status: status, limit: Int(limit))
            return (found, try await lag)
        }
        return JSONBody.response(JobList(jobs: found, replicaLag: lag))
    }

    /// From the audit's server; a job queued a moment ago that a standby has not replayed yet
    /// is read from the primary rather than answered 404.
    @Sendable func job(_ request: Request, context: APIRequestContext) async throws -> Response {
        let id = try Self.jobID(context)
        let (audit, primary) = (JobDirectory(client: self.audit.client, logger: context.logger), self.jobs(context.logger))
        let readsReplica = if case .replica = self.audit { true } else { false }
        let found: JobSummary? = try await deadline.run {
            if let job = try await audit.job(id) { return job }
            return readsReplica ? try await primary.job(id) : nil
        }
        guard let job = found else { throw APIError.notFound("job \(id) not found") }
        return JSONBody.response(job)
    }

    /// Cancels a queued or running job: nothing more is sent, what was sent stays logged.
    @Sendable func cancel(_ request: Request, context: APIRequestContext) async throws -> Response {
        let id = try Self.jobID(context)
        let jobs = self.jobs(context.logger)
        switch try await deadline.run({ try await jobs.cancel(id) }) {
        case .notFound: throw APIError.notFound("job \(id) not found")
        case .alreadyFinished(let status):
            throw APIError(.conflict, code: "JOB_FINISHED", "job \(id) is already \(status)")
        case .cancelled:
            context.logger.info("job cancelled", metadata: ["push.job_id": "\(id)"])
            // The job as it now stands: read only once the cancel took effect.
            guard let job = try await deadline.run({ try await jobs.job(id) }) else { throw APIError.notFound("job \(id) not found") }
            return JSONBody.response(job)
        }
    }

    static func jobID(_ context: APIRequestContext) throws -> Int64 {
        guard let id = context.parameters.get("id").flatMap({ Int64(plainDecimal: $0) }), id > 0 else {
            throw APIError.validation("job id must be a positive integer")
        }
        return id
    }

    // MARK: GET /admin/deliveries

    struct DeliveryPage: Encodable {
        let deliveries: [DeliveryRecord]
        /// Pass as `cursor` for the next (older) page; null on the last page.
        let nextCursor: String?
        let replicaLag: ReplicaLag?

        enum CodingKeys: String, CodingKey { case deliveries, nextCursor, replicaLagSeconds }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(deliveries, forKey: .deliveries)
            try container.encode(nextCursor, forKey: .nextCursor)
            try container.encodeReplicaLag(replicaLag, forKey: .replicaLagSeconds)
        }
    }

    @Sendable func listDeliveries(_ request: Request, context: APIRequestContext) async throws -> Response {
        let query = try QueryParameters(request, allowed: ["jobId", "userId", "appCode", "status", "since", "limit", "cursor"])
        let filter = DeliveryFilter(
            jobID: try query.integer("jobId", in: 1...Int64.max), userID: try query.integer("userId", in: 1...Int64.max),
            appCode: query.string("appCode"), status: try query.oneOf("status", DeliveryStatus.self),
            since: try query.time("since"))
        let limit = try query.integer("limit", in: 1...1000) ?? 100
        let cursor = try query.integer("cursor", in: 1...Int64.max, message: "cursor must be a nextCursor this endpoint returned")
        let (audit, logger) = (self.audit, context.logger)
        let (page, lag) = try await deadline.run {
            async let lag = audit.lag(logger: logger)
            let page = try await DeliveryLog(client: audit.client, logger: logger).page(filter, below: cursor, limit: Int(limit))
            return (page, try await lag)
        }
        return JSONBody.response(
            DeliveryPage(
                deliveries: page.deliveries,
                nextCursor: page.nextCursor.map(String.init), replicaLag: lag))
    }
}

extension KeyedEncodingContainer {
    /// Read from a standby: its lag in seconds (0 caught up, null unknown); from the primary:
    /// nothing, so a response without a read URL is what it always was.
    mutating func encodeReplicaLag(_ lag: ReplicaLag?, forKey key: Key) throws {
        guard let lag else { return }
        try encode(lag.seconds, forKey: key)
    }
}
