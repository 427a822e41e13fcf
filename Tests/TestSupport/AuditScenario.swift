import DeviceRegistry
import Foundation
import Logging
import PostgresNIO
import WireFormats

/// Writes rows the way the service does, for tests of what operators read: apps, devices
/// (through the registry's rules), jobs (through `push_enqueue`), and deliveries as the worker
/// records them.
public struct Seed: Sendable {
    public let client: PostgresClient
    static let logger = Logger(label: "seed")

    public init(_ client: PostgresClient) {
        self.client = client
    }

    /// The app's id, adding the app when it does not exist yet.
    public func app(_ code: String) async throws -> Int64 {
        let directory = AppDirectory(client: client, logger: Self.logger)
        if let app = try await directory.app(code: code) { return app.id }
        return try await directory.add(code: code, name: code.capitalized, serviceAccount: nil).id
    }

    public func device(app: Int64, user: Int64, token: String, platform: String = "ios") async throws -> Int64 {
        try await DeviceDirectory(client: client).register(
            DeviceRegistration(token: token, platform: platform, deviceID: nil, tokenType: nil),
            userID: user, appID: app, logger: Self.logger
        ).device.id
    }

    /// A job to `users`, or a campaign when nil.
    public func job(app: String = "wowa", users: [Int64]? = [1]) async throws -> Int64 {
        try await JobDirectory(client: client, logger: Self.logger).enqueue(
            appCode: app, userIDs: users, platforms: nil, message: #"{"notification":{"title":"t"}}"#,
            idempotencyKey: nil, sendAt: nil, dryRun: false
        ).id
    }

    /// What a worker leaves once it has expanded a job's audience into the rows seeded for it:
    /// nothing of it left to expand (else summaries count the audience's devices as pending too).
    public func expanded(_ jobs: Int64...) async throws {
        try await run(
            "UPDATE push_jobs SET audience_complete = true, audience_cursor = (SELECT max(id) FROM push_devices) WHERE id = ANY(\(jobs))")
    }

    @discardableResult
    public func delivery(
        job: Int64, device: Int64, status: DeliveryStatus = .pending, errorCode: String? = nil,
        errorMessage: String? = nil, fcmMessageID: String? = nil, attempts: Int = 0
    ) async throws -> Int64 {
        try await value(
            """
            INSERT INTO push_deliveries (job_id, device_id, status, error_code, error_message, fcm_message_id, attempts, job_created_at,
                                         app_id)
            SELECT \(job), \(device), \(status), \(errorCode), \(errorMessage), \(fcmMessageID), \(attempts), created_at, app_id
              FROM push_jobs WHERE id = \(job) RETURNING id
            """) ?? 0
    }

    /// The first column of the first row; nil without a row.
    public func value<T: PostgresDecodable & Sendable>(_ query: PostgresQuery, as type: T.Type = T.self) async throws -> T? {
        for try await value in try await client.query(query, logger: Self.logger).decode(T.self) { return value }
        return nil
    }

    public func run(_ query: PostgresQuery) async throws {
        _ = try await client.query(query, logger: Self.logger)
    }
}

/// The audit log every surface (DeliveryLog, HTTP, pushctl) is checked against: apps wowa and
/// beta, three devices, three jobs, five deliveries covering every status, the first two last
/// changed in 2020.
public struct AuditScenario: Sendable {
    /// Device tokens: 40 characters, of which a listing shows the first 20, with a tail that must never appear.
    public static let tokens = [
        "wowa-user1-ios-tokenAPA91b-secret-tail-1", "wowa-user2-android-tAPA91b-secret-tail-2",
        "beta-user1-web-tokenAPA91b-secret-tail-3",
    ]
    public static let failure = (code: "UNREGISTERED", message: #"Requested entity was not found, "gone""#)

    /// [to users 1 and 2 of wowa, to user 1 of beta, a wowa campaign]
    public let jobs: [Int64]
    public let devices: [Int64]
    /// In insertion order, so ascending ids.
    public let deliveries: [Int64]

    public static func seed(_ client: PostgresClient) async throws -> AuditScenario {
        let seed = Seed(client)
        let (wowa, beta) = (try await seed.app("wowa"), try await seed.app("beta"))
        let devices = [
            try await seed.device(app: wowa, user: 1, token: tokens[0], platform: "ios"),
            try await seed.device(app: wowa, user: 2, token: tokens[1], platform: "android"),
            try await seed.device(app: beta, user: 1, token: tokens[2], platform: "web"),
        ]
        let jobs = [
            try await seed.job(app: "wowa", users: [1, 2]), try await seed.job(app: "beta", users: [1]),
            try await seed.job(app: "wowa", users: nil),
        ]
        let deliveries = [
            try await seed.delivery(
                job: jobs[0], device: devices[0], status: .sent, fcmMessageID: "projects/wowa/messages/0:1", attempts: 1),
            try await seed.delivery(
                job: jobs[0], device: devices[1], status: .failed, errorCode: failure.code,
                errorMessage: failure.message, attempts: 2),
            try await seed.delivery(job: jobs[1], device: devices[2], status: .skipped),
            try await seed.delivery(job: jobs[2], device: devices[0]),
            try await seed.delivery(
                job: jobs[2], device: devices[1], status: .sent, fcmMessageID: "projects/wowa/messages/2:1", attempts: 1),
        ]
        try await seed.run("UPDATE push_deliveries SET updated_at = '2020-06-01T00:00:00Z' WHERE id <= \(deliveries[1])")
        try await seed.expanded(jobs[0], jobs[1], jobs[2])
        return AuditScenario(jobs: jobs, devices: devices, deliveries: deliveries)
    }

    /// What a listing shows of `tokens[index]`.
    public static func masked(_ index: Int) -> String { String(tokens[index].prefix(20)) + "…" }

    /// A filter and the deliveries it selects, newest first (indexes into `deliveries`).
    public struct Query: Sendable, CustomStringConvertible {
        public let job: Int?
        public let user: Int64?
        public let app: String?
        public let status: DeliveryStatus?
        public let since: String?
        public let expected: [Int]

        init(
            job: Int? = nil, user: Int64? = nil, app: String? = nil, status: DeliveryStatus? = nil, since: String? = nil, _ expected: [Int]
        ) {
            (self.job, self.user, self.app, self.status, self.since, self.expected) = (job, user, app, status, since, expected)
        }

        public var description: String {
            [job.map { "job#\($0)" }, user.map { "user \($0)" }, app, status?.rawValue, since.map { "since \($0)" }]
                .compactMap { $0 }.joined(separator: " ") + " → \(expected)"
        }

        public func filter(_ scenario: AuditScenario) -> DeliveryFilter {
            DeliveryFilter(
                jobID: job.map { scenario.jobs[$0] }, userID: user, appCode: app, status: status,
                since: since.flatMap(ISO8601Time.parse))
        }

        /// `jobId=…&userId=…` for GET /admin/deliveries.
        public func queryString(_ scenario: AuditScenario) -> String {
            let pairs = [
                ("jobId", job.map { String(scenario.jobs[$0]) }), ("userId", user.map(String.init)), ("appCode", app),
                ("status", status?.rawValue), ("since", since),
            ]
            let unreserved = CharacterSet.alphanumerics.union(CharacterSet(charactersIn: "-._~:"))
            return pairs.compactMap { name, value in
                value.map { "\(name)=\($0.addingPercentEncoding(withAllowedCharacters: unreserved) ?? $0)" }
            }.joined(separator: "&")
        }

        /// `--job … --user …` for pushctl deliveries.
        public func arguments(_ scenario: AuditScenario) -> [String] {
            let pairs = [
                ("--job", job.map { String(scenario.jobs[$0]) }), ("--user", user.map(String.init)), ("--app", app),
                ("--status", status?.rawValue), ("--since", since),
            ]
            return pairs.flatMap { name, value in value.map { [name, $0] } ?? [] }
        }

        public func expectedIDs(_ scenario: AuditScenario) -> [Int64] { expected.map { scenario.deliveries[$0] } }
    }

    public static let queries: [Query] = [
        Query([4, 3, 2, 1, 0]),
        Query(job: 0, [1, 0]),
        Query(user: 1, [3, 2, 0]),
        Query(app: "beta", [2]),
        Query(status: .sent, [4, 0]),
        Query(status: .pending, [3]),
        Query(since: "2021-01-01T00:00:00Z", [4, 3, 2]),
        Query(since: "2021-01-01T01:00:00.500+01:00", [4, 3, 2]),
        Query(since: "2020-06-01T00:00:00Z", [4, 3, 2, 1, 0]),
        Query(job: 2, user: 2, [4]),
        Query(app: "wowa", status: .failed, [1]),
        Query(app: "nope", []),
        Query(user: 3, []),
    ]
}

extension TestDatabase {
    public func seed<T: Sendable>(_ body: @Sendable (Seed) async throws -> T) async throws -> T {
        try await withClient { try await body(Seed($0)) }
    }

    /// One value from SQL as text; "" without a row or for NULL.
    public func text(_ query: PostgresQuery) async throws -> String {
        try await seed { try await $0.value(query, as: String?.self) ?? nil } ?? ""
    }
}
