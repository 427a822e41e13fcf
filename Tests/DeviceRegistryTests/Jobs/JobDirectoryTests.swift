import DeviceRegistry
import Foundation
import PostgresNIO
import TestSupport
import Testing
import WireFormats

/// Scheduling priority and expiry (issue 24), over SQL as backend teams call it and through
/// `JobDirectory` as push-api and pushctl do.
@Suite("JobDirectory: priority and expiry")
struct JobPriorityAndExpiryTests {
    static let message = #"{"notification":{"title":"t"}}"#

    func withApp(_ body: @Sendable (JobDirectory, PostgresClient) async throws -> Void) async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            _ = try await client.query(
                """
                INSERT INTO push_devices (user_id, app_id, token, platform) SELECT g, \(app), 'tok-' || g, 'android' FROM generate_series(1, 3) g
                """)
            try await body(JobDirectory(client: client, logger: testLogger), client)
        }
    }

    func stored(_ client: PostgresClient, _ job: Int64) async throws -> (priority: String, expiresAt: Date?, sendAt: Date) {
        for try await row in try await client.query("SELECT priority, expires_at, send_at FROM push_jobs WHERE id = \(job)")
            .decode((String, Date?, Date).self)
        {
            return row
        }
        throw CancellationError()
    }

    @Test func sqlCallersGetHighForUsersAndBulkForCampaignsAndMayNameAny() async throws {
        try await withApp { (_, client) async throws in
            func enqueue(campaign: Bool, _ priority: String? = nil) async throws -> String {
                let call: PostgresQuery =
                    switch (campaign, priority) {
                    case (false, nil):
                        "SELECT push_enqueue(app_code => 'wowa', user_ids => ARRAY[1]::bigint[], message => \(Self.message)::jsonb)"
                    case (true, nil): "SELECT push_enqueue_campaign(app_code => 'wowa', message => \(Self.message)::jsonb)"
                    case (false, let priority?):
                        "SELECT push_enqueue(app_code => 'wowa', user_ids => ARRAY[1]::bigint[], message => \(Self.message)::jsonb, priority => \(priority))"
                    case (true, let priority?):
                        "SELECT push_enqueue_campaign(app_code => 'wowa', message => \(Self.message)::jsonb, priority => \(priority))"
                    }
                var id: Int64 = 0
                for try await value in try await client.query(call).decode(Int64.self) { id = value }
                return try await stored(client, id).priority
            }
            #expect(try await enqueue(campaign: false) == "high")
            #expect(try await enqueue(campaign: true) == "bulk")
            for priority in JobPriority.allCases.map(\.rawValue) {
                #expect(try await enqueue(campaign: false, priority) == priority)
                #expect(try await enqueue(campaign: true, priority) == priority)
            }
            // What a JobPriority cannot hold is refused by the functions themselves.
            for call: PostgresQuery in [
                "SELECT push_enqueue(app_code => 'wowa', user_ids => ARRAY[1]::bigint[], message => '{}', priority => 'urgent')",
                "SELECT push_enqueue_campaign(app_code => 'wowa', message => '{}', priority => NULL)",
            ] {
                // The RAISE arrives with the rows.
                await #expect { for try await _ in try await client.query(call) {} } throws: { error in
                    DatabaseErrorText.sqlState(error) == .invalidParameterValue
                        && DatabaseErrorText.describe(error).hasPrefix("priority must be high, normal or bulk, not ")
                }
            }
            #expect(try await count(client, "SELECT count(*)::int FROM push_jobs") == 8)
        }
    }

    /// 'infinity' is a time PostgreSQL holds, but no job can be due or expire then: the
    /// functions refuse it for send_at and expires_at (a job queued for 'infinity' was never
    /// sent, and nothing said so).
    @Test func infiniteTimesAreRefusedByTheFunctions() async throws {
        try await withApp { (_, client) async throws in
            let calls: [(PostgresQuery, String)] = [
                (
                    "SELECT push_enqueue(app_code => 'wowa', user_ids => ARRAY[1]::bigint[], message => '{}', send_at => 'infinity')",
                    "send_at must be a finite time, not infinity"
                ),
                (
                    "SELECT push_enqueue_campaign(app_code => 'wowa', message => '{}', send_at => '-infinity')",
                    "send_at must be a finite time, not -infinity"
                ),
                (
                    "SELECT push_enqueue(app_code => 'wowa', user_ids => ARRAY[1]::bigint[], message => '{}', expires_at => 'infinity')",
                    "expires_at must be a finite time, not infinity"
                ),
            ]
            for (call, says) in calls {
                await #expect { for try await _ in try await client.query(call) {} } throws: { error in
                    DatabaseErrorText.sqlState(error) == .invalidParameterValue && DatabaseErrorText.describe(error) == says
                }
            }
            #expect(try await count(client, "SELECT count(*)::int FROM push_jobs") == 0)
        }
    }

    @Test func enqueueLeavesTheDefaultToTheFunctionsAndPassesAPriorityThrough() async throws {
        try await withApp { (jobs, client) async throws in
            func enqueue(users: [Int64]?, _ priority: JobPriority?) async throws -> JobSummary {
                let id = try await jobs.enqueue(
                    appCode: "wowa", userIDs: users, platforms: nil, message: Self.message, idempotencyKey: nil,
                    sendAt: nil, dryRun: false, priority: priority
                ).id
                return try #require(try await jobs.job(id))
            }
            #expect(try await enqueue(users: [1], nil).priority == .high)
            #expect(try await enqueue(users: nil, nil).priority == .bulk)
            for priority in JobPriority.allCases {
                #expect(try await enqueue(users: [1], priority).priority == priority)
                #expect(try await enqueue(users: nil, priority).priority == priority)
            }
            let job = try await enqueue(users: [1, 2], nil)
            #expect(job.expiresAt == nil && job.expired == 0 && job.pending == 2)
        }
    }

    @Test func anExpiryIsStoredFromExpiresAtOrFromSendAtPlusTTL() async throws {
        try await withApp { (jobs, client) async throws in
            let sendAt = try #require(ISO8601Time.parse("2030-01-01T09:00:00Z"))
            let expiresAt = try #require(ISO8601Time.parse("2030-01-01T10:00:00.250Z"))
            let byTime = try await jobs.enqueue(
                appCode: "wowa", userIDs: [1], platforms: nil, message: Self.message, idempotencyKey: nil,
                sendAt: sendAt, dryRun: false, expiresAt: expiresAt
            ).id
            #expect(try await stored(client, byTime).expiresAt == expiresAt)
            let byTTL = try await jobs.enqueue(
                appCode: "wowa", userIDs: nil, platforms: nil, message: Self.message, idempotencyKey: nil,
                sendAt: sendAt, dryRun: false, ttl: .seconds(90) + .milliseconds(500)
            ).id
            #expect(try await stored(client, byTTL).expiresAt == sendAt + 90.5)
            // Without a send time, from now.
            let fromNow = try await jobs.enqueue(
                appCode: "wowa", userIDs: [1], platforms: nil, message: Self.message, idempotencyKey: nil,
                sendAt: nil, dryRun: false, ttl: .seconds(3600)
            ).id
            let row = try await stored(client, fromNow)
            #expect(abs(try #require(row.expiresAt).timeIntervalSince(row.sendAt) - 3600) < 0.001)
            let summary = try #require(try await jobs.job(byTime))
            #expect(summary.expiresAt == expiresAt && summary.expired == 0)
        }
    }

    struct Refusal: Sendable, CustomTestStringConvertible {
        let name: String
        var sendAt: Date?
        var expiresAt: Date?
        var ttl: Duration?
        let says: String
        var testDescription: String { name }
    }

    static let refusals: [Refusal] = [
        Refusal(name: "expiry in the past", expiresAt: Date() - 60, says: "is in the past"),
        Refusal(name: "expiry not after the send time", sendAt: Date() + 7200, expiresAt: Date() + 3600, says: "is not after send_at"),
        Refusal(name: "both expiresAt and ttl", expiresAt: Date() + 3600, ttl: .seconds(60), says: "give expires_at or ttl, not both"),
        Refusal(name: "ttl of zero", ttl: .zero, says: "ttl must be positive"),
        Refusal(name: "negative ttl", ttl: .seconds(-5), says: "ttl must be positive"),
        Refusal(name: "ttl past PostgreSQL's range", ttl: .seconds(Int64.max), says: "ends after 9999-12-31"),
        // The API would show an expiry it cannot read back (+010009-…).
        Refusal(
            name: "ttl ending after year 9999", sendAt: Date(timeIntervalSince1970: 253_402_214_400), ttl: .seconds(315_360_000),
            says: "ends after 9999-12-31"),
    ]

    @Test(arguments: refusals)
    func refusalsAreEnqueueRejectedAndQueueNothing(_ refusal: Refusal) async throws {
        try await withApp { (jobs, client) async throws in
            for users: [Int64]? in [[1], nil] {
                let error = await #expect(throws: EnqueueRejected.self) {
                    try await jobs.enqueue(
                        appCode: "wowa", userIDs: users, platforms: nil, message: Self.message, idempotencyKey: nil,
                        sendAt: refusal.sendAt, dryRun: false, priority: .high, expiresAt: refusal.expiresAt,
                        ttl: refusal.ttl
                    ).id
                }
                #expect(error?.description.contains(refusal.says) == true, "\(String(describing: error))")
                #expect(error?.parameter == .expiry, "callers name their expiry option for \(String(describing: error))")
            }
            #expect(try await count(client, "SELECT count(*)::int FROM push_jobs") == 0)
        }
    }

    /// What is not sent by the expiry is skipped EXPIRED (`push_expire_jobs`, which workers call
    /// every second); the summary counts those apart.
    @Test func expiredDeliveriesAreSkippedAndCountedInTheSummary() async throws {
        try await withApp { (jobs, client) async throws in
            let expiring = try await jobs.enqueue(
                appCode: "wowa", userIDs: [1, 2, 3], platforms: nil, message: Self.message,
                idempotencyKey: nil, sendAt: nil, dryRun: false, priority: .normal, ttl: .seconds(1)
            ).id
            let lasting = try await jobs.enqueue(
                appCode: "wowa", userIDs: [1], platforms: nil, message: Self.message,
                idempotencyKey: nil, sendAt: nil, dryRun: false, ttl: .seconds(3600)
            ).id
            let before = try #require(try await jobs.job(expiring))
            #expect(before.status == .queued && before.pending == 3 && before.expired == 0 && before.priority == .normal)
            try await Task.sleep(for: .milliseconds(1100))
            var completed: [Int64] = []
            for try await id in try await client.query("SELECT push_expire_jobs()").decode(Int64.self) { completed.append(id) }
            #expect(completed == [expiring])
            let after = try #require(try await jobs.job(expiring))
            #expect(after.status == .completed && after.audience == 3 && after.skipped == 3 && after.expired == 3 && after.pending == 0)
            #expect(after.expiresAt == before.expiresAt && after.priority == .normal)
            #expect(abs(try #require(after.expiresAt).timeIntervalSince(after.sendAt) - 1) < 0.001)
            let expiredRows: PostgresQuery =
                "SELECT count(*)::int FROM push_deliveries WHERE job_id = \(expiring) AND error_code = 'EXPIRED'"
            #expect(try await count(client, expiredRows) == 3)
            let other = try #require(try await jobs.job(lasting))
            #expect(other.status == .queued && other.expired == 0 && other.pending == 1 && other.priority == .high)
            let listed = try await jobs.list(status: nil, limit: 10)
            #expect(listed.map(\.id) == [lasting, expiring] && listed.map(\.expired) == [0, 3])
        }
    }
}

@Suite("JobDirectory refusals")
struct EnqueueRefusalTests {
    /// What push-api turns into 400 VALIDATION_FAILED naming the field.
    @Test func anEnqueueTheSQLRefusesThrowsEnqueueRejected() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            _ = try await addApp(client)
            let jobs = JobDirectory(client: client, logger: testLogger)
            let refused: [(String, String, String, EnqueueRejected.Parameter?)] = [
                ("nope", #"{"notification":{"title":"t"}}"#, #"unknown app code "nope""#, .appCode),
                ("wowa", #"{"data":{"k":1}}"#, "message.data.k must be a string", nil),
                ("wowa", #"{"token":"x"}"#, "message must not carry a target (token): the worker adds each device's token", nil),
                ("wowa", #"{"fcm_options":{},"fcmOptions":{}}"#, #"message has both "fcm_options" and "fcmOptions": give one"#, nil),
            ]
            for (app, message, reason, parameter) in refused {
                await #expect(throws: EnqueueRejected(description: reason, parameter: parameter)) {
                    try await jobs.enqueue(
                        appCode: app, userIDs: [1], platforms: nil, message: message, idempotencyKey: nil, sendAt: nil, dryRun: false
                    ).id
                }
            }
            // An unset variable in a cron line must not become a key that swallows every later run.
            for key in ["", String(repeating: "k", count: 201)] {
                for userIDs: [Int64]? in [[1], nil] {
                    await #expect(
                        throws: EnqueueRejected(description: "idempotency key must be 1 to 200 characters (leave it out for none)")
                    ) {
                        try await jobs.enqueue(
                            appCode: "wowa", userIDs: userIDs, platforms: nil, message: "{}", idempotencyKey: key, sendAt: nil,
                            dryRun: false
                        ).id
                    }
                }
            }
            await #expect(throws: EnqueueRejected.self) {
                try await jobs.enqueue(
                    appCode: "wowa", userIDs: nil, platforms: nil, message: "not json", idempotencyKey: nil, sendAt: nil, dryRun: false
                ).id
            }
            #expect(try await count(client, "SELECT count(*)::int FROM push_jobs") == 0)
        }
    }

    /// FCM takes lowerCamelCase field names as well as snake_case ones.
    @Test func fcmOptionsMayBeSpelledInCamelCase() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            _ = try await addApp(client)
            let jobs = JobDirectory(client: client, logger: testLogger)
            for message in [#"{"fcmOptions":{"analyticsLabel":"digest"}}"#, #"{"fcm_options":{"analytics_label":"digest"}}"#] {
                _ = try await jobs.enqueue(
                    appCode: "wowa", userIDs: [1], platforms: nil, message: message, idempotencyKey: nil, sendAt: nil,
                    dryRun: false
                ).id
            }
            #expect(try await count(client, "SELECT count(*)::int FROM push_jobs") == 2)
        }
    }

    /// Enqueues racing with one key queue one job, and only the one that queued it says so: the
    /// others, which waited for it on the key, are replays, however close together they started.
    @Test func racingEnqueuesWithOneKeyQueueOneJobAndTheOthersAreReplays() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            _ = try await addApp(client)
            let jobs = JobDirectory(client: client, logger: testLogger)
            let enqueued = try await withThrowingTaskGroup(of: EnqueuedJob.self) { group in
                for _ in 1...8 {
                    group.addTask {
                        try await jobs.enqueue(
                            appCode: "wowa", userIDs: [1], platforms: nil, message: #"{"notification":{"title":"t"}}"#,
                            idempotencyKey: "order-4711-shipped", sendAt: nil, dryRun: false)
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(Set(enqueued.map(\.id)).count == 1 && enqueued.count { !$0.queuedBefore } == 1, "\(enqueued)")
            #expect(try await count(client, "SELECT count(*)::int FROM push_jobs") == 1)
        }
    }

    /// A rehearsal must not swallow the real send: the same key with the other dry-run setting is refused.
    @Test func aDryRunAndARealSendNeverShareAnIdempotencyKey() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            _ = try await addApp(client)
            let jobs = JobDirectory(client: client, logger: testLogger)
            func enqueue(dryRun: Bool) async throws -> EnqueuedJob {
                try await jobs.enqueue(
                    appCode: "wowa", userIDs: nil, platforms: nil, message: #"{"notification":{"title":"t"}}"#,
                    idempotencyKey: "daily-digest-2026-11-21", sendAt: nil, dryRun: dryRun)
            }
            let first = try await enqueue(dryRun: true)
            let rehearsal = first.id
            #expect(!first.queuedBefore)
            #expect(try await enqueue(dryRun: true) == EnqueuedJob(id: rehearsal, queuedBefore: true))
            await #expect(
                throws: EnqueueRejected(
                    description:
                        #"idempotency key "daily-digest-2026-11-21" was used by dry-run job \#(rehearsal); give the real send its own key"#)
            ) {
                try await enqueue(dryRun: false)
            }
            #expect(try await count(client, "SELECT count(*)::int FROM push_jobs") == 1)
        }
    }

    /// FCM bounds the keys and values one device is sent, not the JSON text of the whole message:
    /// messages FCM takes are queued, the ones it refuses for every device are not.
    @Test func theMessageCheckMeasuresWhatFCMCountsAndRefusesWhatItRefuses() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            _ = try await addApp(client)
            func enqueue(_ message: String) async throws -> String {
                do {
                    // The functions' RAISE arrives with the rows.
                    for try await _ in try await client.query(
                        "SELECT push_enqueue(app_code => 'wowa', user_ids => ARRAY[1]::bigint[], message => \(message)::jsonb)")
                    {}
                    return "queued"
                } catch {
                    return DatabaseErrorText.describe(error)
                }
            }
            let body = String(repeating: "b", count: 1400)
            // 400 pairs of 10 bytes: 4,000 bytes of payload, 6,400 as JSON (and more as jsonb prints it).
            let manyKeys = (0..<400).map { #""k\#(String(format: "%03d", $0))":"vvvvvv""# }.joined(separator: ",")
            #expect(try await enqueue(#"{"data":{\#(manyKeys)}}"#) == "queued")
            #expect(
                try await enqueue(
                    #"{"notification":{"body":"\#(body)"},"android":{"notification":{"body":"\#(body)"}},"apns":{"payload":{"aps":{"alert":{"body":"\#(body)"}}}}}"#
                ) == "queued")
            #expect(try await enqueue(#"{"data":{"blob":"\#(String(repeating: "x", count: 4092))"}}"#) == "queued")
            #expect(
                try await enqueue(#"{"data":{"blob":"\#(String(repeating: "x", count: 4093))"}}"#)
                    == "message payload is 4097 bytes (keys and values of the notification, the data and the largest platform's block); FCM allows 4096"
            )
            // The data and the platform's block go to one device together.
            #expect(
                try await enqueue(
                    #"{"data":{"d":"\#(String(repeating: "x", count: 2100))"},"android":{"data":{"a":"\#(String(repeating: "y", count: 2100))"}}}"#
                )
                .hasSuffix("FCM allows 4096"))
            // FCM's own keys in any case, and in every data map it delivers.
            #expect(try await enqueue(#"{"data":{"From":"x"}}"#) == "message.data.From is a reserved key")
            #expect(try await enqueue(#"{"data":{"Google.c.a.e":"1"}}"#) == "message.data.Google.c.a.e is a reserved key")
            #expect(try await enqueue(#"{"android":{"data":{"gcm.n.e":"1"}}}"#) == "message.android.data.gcm.n.e is a reserved key")
            #expect(try await enqueue(#"{"webpush":{"data":{"n":1}}}"#) == "message.webpush.data.n must be a string")
            #expect(try await enqueue(#"{"android":{"data":["x"]}}"#) == "message.android.data must be an object of strings")
            // What the payload leaves out is bounded as a whole.
            #expect(
                try await enqueue(#"{"android":{"collapse_key":"\#(String(repeating: "c", count: 70_000))"}}"#)
                    .hasPrefix("message is 70"))
            // The members FCM types, typed as it types them.
            #expect(try await enqueue(#"{"notification":{"title":5}}"#) == "message.notification.title must be a string")
            #expect(
                try await enqueue(#"{"notification":{"titel":"x"}}"#)
                    == #"message.notification has an unknown field "titel" (title, body, image)"#)
            #expect(try await enqueue(#"{"notification":"x"}"#) == "message.notification must be an object")
            let ttl = #"message.android.ttl must be a duration in seconds such as "3600s" or "3.5s""#
            #expect(try await enqueue(#"{"android":{"ttl":"1 hour"}}"#) == ttl)
            #expect(try await enqueue(#"{"android":{"ttl":3600}}"#) == ttl)
            #expect(try await enqueue(#"{"apns":{"headers":{"apns-priority":10}}}"#) == "message.apns.headers must be an object of strings")
            #expect(try await enqueue(#"{"webpush":{"headers":["TTL"]}}"#) == "message.webpush.headers must be an object of strings")
            #expect(
                try await enqueue(
                    #"{"android":{"ttl":"3.5s"},"apns":{"headers":{"apns-priority":"10"}},"notification":{"image":"https://x"}}"#)
                    == "queued")
            // A member set to null is one left out, as FCM reads it (Jackson and Python's json write
            // an unset field so); a map's values are strings still.
            #expect(
                try await enqueue(
                    #"{"notification":{"title":"Hi","image":null},"android":{"ttl":null,"data":null},"apns":{"headers":null},"data":null}"#)
                    == "queued")
            #expect(try await enqueue(#"{"notification":null,"webpush":null}"#) == "queued")
            // …and weighs nothing: 4096 bytes of payload with a null beside them.
            #expect(
                try await enqueue(
                    #"{"notification":{"title":"\#(String(repeating: "t", count: 4091))","image":null},"android":{"data":null}}"#)
                    == "queued")
            #expect(try await enqueue(#"{"data":{"k":null}}"#) == "message.data.k must be a string")
            #expect(
                try await enqueue(#"{"apns":{"headers":{"apns-priority":null}}}"#) == "message.apns.headers must be an object of strings")
            do {
                for try await _ in try await client.query(
                    "SELECT push_enqueue(app_code => 'wowa', user_ids => ARRAY[3, 0]::bigint[], message => '{\"data\":{}}'::jsonb)")
                {}
                Issue.record("a user id of 0 was queued")
            } catch {
                #expect(DatabaseErrorText.describe(error) == "user_ids must be positive, as every user id is")
            }
            #expect(try await count(client, "SELECT count(*)::int FROM push_jobs") == 7)
        }
    }
}

@Suite("Ending jobs")
struct JobEndingTests {
    /// A worker expanding the audience holds the job row while it inserts a chunk: a cancel
    /// arriving meanwhile waits, then skips that chunk too. Nothing is left pending for ever.
    @Test func aCancelDuringAudienceExpansionLeavesNothingPending() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        try await database.withClient { client in
            let app = try await addApp(client)
            _ = try await client.query(
                "INSERT INTO push_devices (user_id, app_id, token, platform) SELECT g, \(app), 'expand-' || g, 'ios' FROM generate_series(1, 50) g"
            )
            let job = try await JobDirectory(client: client, logger: testLogger).enqueue(
                appCode: "wowa", userIDs: nil, platforms: nil, message: #"{"notification":{"title":"t"}}"#, idempotencyKey: nil,
                sendAt: nil, dryRun: false
            ).id
            _ = try await client.query("UPDATE push_jobs SET status = 'running' WHERE id = \(job)")
            try await withThrowingTaskGroup(of: Void.self) { group in
                try await client.withTransaction(logger: testLogger) { expander in
                    _ = try await expander.query("SELECT id FROM push_jobs WHERE id = \(job) FOR UPDATE", logger: testLogger)
                    group.addTask { () async throws in
                        let outcome = try await JobDirectory(client: client, logger: testLogger).cancel(job)
                        #expect(outcome == .cancelled)
                    }
                    try await Task.sleep(for: .milliseconds(300))  // the cancel is now waiting for the row
                    _ = try await expander.query(
                        "INSERT INTO push_deliveries (job_id, device_id, job_created_at, app_id) SELECT \(job), d.id, j.created_at, j.app_id FROM push_devices d, push_jobs j WHERE j.id = \(job)",
                        logger: testLogger)
                }
                try await group.waitForAll()
            }
            #expect(try await count(client, "SELECT count(*)::int FROM push_deliveries WHERE status = 'pending'") == 0)
            #expect(
                try await count(client, "SELECT count(*)::int FROM push_deliveries WHERE status = 'skipped' AND error_code = 'CANCELLED'")
                    == 50)
        }
    }
    /// A worker that stopped while holding deliveries (killed, cut off) may have sent them: the
    /// cancellation says so for those, and only for those.
    @Test func aCancelSaysWhatAStoppedWorkerHeldMayHaveBeenSent() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            _ = try await client.query(
                "INSERT INTO push_devices (user_id, app_id, token, platform) SELECT g, \(app), 'held-' || g, 'android' FROM generate_series(1, 6) g"
            )
            let job = try await JobDirectory(client: client, logger: testLogger).enqueue(
                appCode: "wowa", userIDs: nil, platforms: nil, message: #"{"notification":{"title":"t"}}"#, idempotencyKey: nil,
                sendAt: nil, dryRun: false
            ).id
            _ = try await client.query("UPDATE push_jobs SET status = 'running' WHERE id = \(job)")
            // Devices 1 and 2 have rows: 1 waiting for a retry, 2 held by a worker whose lease ran out.
            // Devices 3 to 5 are a chunk whose worker's lease ran out.
            _ = try await client.query(
                """
                INSERT INTO push_deliveries (job_id, device_id, job_created_at, app_id, lease_owner, next_attempt_at)
                SELECT \(job), d.id, j.created_at, j.app_id, CASE WHEN d.user_id = 2 THEN 'gone-worker' END, now() - interval '1 minute'
                  FROM push_devices d, push_jobs j WHERE j.id = \(job) AND d.user_id IN (1, 2)
                """)
            _ = try await client.query(
                """
                INSERT INTO push_job_chunks (job_id, device_ids, lease_owner, lease_until)
                SELECT \(job), array_agg(id ORDER BY id), 'gone-worker', now() - interval '1 minute' FROM push_devices WHERE user_id BETWEEN 3 AND 5
                """)
            // Device 6's chunk was released by a worker that stopped cleanly: none of it was in flight.
            _ = try await client.query(
                """
                INSERT INTO push_job_chunks (job_id, device_ids, lease_owner, lease_until)
                SELECT \(job), array_agg(id), '', now() FROM push_devices WHERE user_id = 6
                """)
            #expect(try await JobDirectory(client: client, logger: testLogger).cancel(job) == .cancelled)
            var messages: [Int64: String] = [:]
            for try await (user, status, code, message) in try await client.query(
                """
                SELECT d.user_id, r.status, r.error_code, r.error_message
                  FROM push_deliveries r JOIN push_devices d ON d.id = r.device_id WHERE r.job_id = \(job)
                """
            ).decode((Int64, String, String, String).self) {
                #expect(status == "skipped" && code == "CANCELLED")
                messages[user] = message
            }
            let held = "the job was cancelled; " + JobDirectory.heldByAStoppedWorker
            #expect(messages == [1: "the job was cancelled", 2: held, 3: held, 4: held, 5: held, 6: "the job was cancelled"])
            #expect(try await count(client, "SELECT count(*)::int FROM push_job_chunks") == 0)
        }
    }

    /// An ending NOTIFYs the workers with the job's id at its commit, so that they stop sending
    /// it at once; a job already finished is not announced again.
    @Test func anEndingIsAnnouncedToTheWorkersAtItsCommit() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            _ = try await client.query(
                "INSERT INTO push_devices (user_id, app_id, token, platform) VALUES (1, \(app), 'announced-1', 'android')")
            let directory = JobDirectory(client: client, logger: testLogger)
            let job = try await directory.enqueue(
                appCode: "wowa", userIDs: nil, platforms: nil, message: #"{"notification":{"title":"t"}}"#, idempotencyKey: nil,
                sendAt: nil, dryRun: false
            ).id
            let payloads = try await client.withConnection { connection in
                try await connection.listen(on: JobDirectory.endedJobsChannel) { notifications in
                    #expect(try await directory.cancel(job) == .cancelled)
                    #expect(try await directory.cancel(job) == .alreadyFinished(status: .cancelled))
                    // A marker NOTIFY after both: every announcement of the cancels came before it.
                    _ = try await client.query("SELECT pg_notify(\(JobDirectory.endedJobsChannel), 'marker')")
                    var payloads: [String] = []
                    for try await notification in notifications {
                        if notification.payload == "marker" { break }
                        payloads.append(notification.payload)
                    }
                    return payloads
                }
            }
            #expect(payloads == ["\(job)"])
        }
    }

    /// A job failed while a worker held three of its retries: the held rows stay pending at the
    /// ending. One the worker then records is its own; one whose lease ran out is settled with
    /// the job's reason and what it may mean; the job stays listed until the last lease runs out.
    @Test func heldDeliveriesOfAnEndedJobAreSettledOnlyOnceTheirLeaseRanOut() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            _ = try await client.query(
                "INSERT INTO push_devices (user_id, app_id, token, platform) SELECT g, \(app), 'held-' || g, 'android' FROM generate_series(1, 3) g"
            )
            let jobs = JobDirectory(client: client, logger: testLogger)
            let job = try await jobs.enqueue(
                appCode: "wowa", userIDs: [1, 2, 3], platforms: nil, message: #"{"notification":{"title":"t"}}"#, idempotencyKey: nil,
                sendAt: nil, dryRun: false
            ).id
            _ = try await client.query("UPDATE push_jobs SET status = 'running', audience_complete = true WHERE id = \(job)")
            _ = try await client.query(
                """
                INSERT INTO push_deliveries (job_id, device_id, job_created_at, app_id, lease_owner, next_attempt_at)
                SELECT \(job), d.id, j.created_at, j.app_id, 'worker-' || d.user_id, now() + interval '1 hour'
                  FROM push_devices d, push_jobs j WHERE j.id = \(job)
                """)
            #expect(try await jobs.end(job, .failed(reason: "SENDER_ID_MISMATCH: the project refused")))
            let listed: PostgresQuery = "SELECT count(*)::int FROM push_jobs_held_at_ending WHERE job_id = \(job)"
            #expect(try await count(client, listed) == 1)
            #expect(try await jobs.settleHeldAtEndings() == 0, "every lease is alive")
            // User 1's worker records its result; user 2's lease runs out; user 3's is still alive.
            _ = try await client.query(
                "UPDATE push_deliveries SET status = 'sent', lease_owner = NULL WHERE job_id = \(job) AND lease_owner = 'worker-1'")
            _ = try await client.query(
                "UPDATE push_deliveries SET next_attempt_at = now() - interval '1 second' WHERE job_id = \(job) AND lease_owner = 'worker-2'"
            )
            #expect(try await jobs.settleHeldAtEndings() == 1)
            #expect(try await count(client, listed) == 1, "user 3's delivery is still held")
            var rows: [Int64: String] = [:]
            for try await (user, status, code, message) in try await client.query(
                """
                SELECT d.user_id, r.status, COALESCE(r.error_code, ''), COALESCE(r.error_message, '')
                  FROM push_deliveries r JOIN push_devices d ON d.id = r.device_id WHERE r.job_id = \(job)
                """
            ).decode((Int64, String, String, String).self) {
                rows[user] = [status, code, message].joined(separator: "|")
            }
            #expect(
                rows == [
                    1: "sent||", 2: "failed|JOB_FAILED|SENDER_ID_MISMATCH: the project refused; " + JobDirectory.heldByAStoppedWorker,
                    3: "pending||",
                ])
            _ = try await client.query(
                "UPDATE push_deliveries SET next_attempt_at = now() - interval '1 second' WHERE job_id = \(job) AND lease_owner = 'worker-3'"
            )
            #expect(try await jobs.settleHeldAtEndings() == 1)
            #expect(try await jobs.settleHeldAtEndings() == 0)
            #expect(try await count(client, listed) == 0, "forgotten a pass after its last row was settled")
        }
    }

    /// A worker's write that read the job running before a cancel commits after it: the retry it
    /// writes is nobody's. The cancel listed the job for the chunk that worker held, so the
    /// retry is settled (without "may have been sent": its worker is alive and recorded it), and
    /// the job is forgotten once nothing is pending and no chunk is left.
    @Test func aRetryWrittenAfterTheEndingByAWriteThatRacedItIsSettled() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            _ = try await client.query(
                "INSERT INTO push_devices (user_id, app_id, token, platform) VALUES (1, \(app), 'raced-1', 'android')")
            let jobs = JobDirectory(client: client, logger: testLogger)
            let job = try await jobs.enqueue(
                appCode: "wowa", userIDs: [1], platforms: nil, message: #"{"notification":{"title":"t"}}"#, idempotencyKey: nil,
                sendAt: nil, dryRun: false
            ).id
            _ = try await client.query("UPDATE push_jobs SET status = 'running', audience_complete = true WHERE id = \(job)")
            _ = try await client.query(
                """
                INSERT INTO push_job_chunks (job_id, device_ids, lease_owner, lease_until)
                SELECT \(job), ARRAY[id], 'worker-1', now() + interval '1 hour' FROM push_devices
                """)
            #expect(try await jobs.cancel(job) == .cancelled)
            let listed: PostgresQuery = "SELECT count(*)::int FROM push_jobs_held_at_ending WHERE job_id = \(job)"
            #expect(try await count(client, listed) == 1, "the chunk is held")
            // The worker's write, as it commits: the device's retry, its chunk gone.
            _ = try await client.query(
                """
                WITH finished AS (DELETE FROM push_job_chunks WHERE job_id = \(job))
                INSERT INTO push_deliveries (job_id, device_id, status, error_code, attempts, next_attempt_at, job_created_at, app_id)
                SELECT j.id, d.id, 'pending', 'UNAVAILABLE', 1, now() + interval '10 seconds', j.created_at, j.app_id
                  FROM push_jobs j, push_devices d WHERE j.id = \(job)
                """)
            #expect(try await jobs.settleHeldAtEndings() == 1)
            #expect(
                try await count(
                    client,
                    "SELECT count(*)::int FROM push_deliveries WHERE status = 'skipped' AND error_code = 'CANCELLED' AND error_message = 'the job was cancelled'"
                ) == 1)
            #expect(try await count(client, listed) == 1, "forgotten a pass later")
            #expect(try await jobs.settleHeldAtEndings() == 0)
            #expect(try await count(client, listed) == 0)
        }
    }

    /// The moment to give up bounds the statement, not the statement's own run: an enqueue that
    /// got its connection at that moment, behind a lock, is given up at once and queues nothing.
    @Test func anEnqueuePastItsMomentToGiveUpIsAbandonedAtOnce() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        try await database.withClient { client in
            _ = try await addApp(client)
            try await withThrowingTaskGroup(of: Void.self) { group in
                let locked = AsyncStream.makeStream(of: Void.self)
                group.addTask {
                    try await client.withTransaction(logger: testLogger) { transaction in
                        _ = try await transaction.query("LOCK TABLE push_jobs IN ACCESS EXCLUSIVE MODE", logger: testLogger)
                        locked.continuation.yield()
                        try await Task.sleep(for: .seconds(3))
                    }
                }
                for await _ in locked.stream { break }
                let start = ContinuousClock.now
                await #expect {
                    _ = try await JobDirectory(client: client, logger: testLogger).enqueue(
                        appCode: "wowa", userIDs: [1], platforms: nil, message: #"{"notification":{"title":"t"}}"#,
                        idempotencyKey: nil, sendAt: nil, dryRun: false, giveUpAt: start - .seconds(1))
                } throws: { error in
                    DatabaseErrorText.sqlState(error) == .queryCanceled
                }
                #expect(ContinuousClock.now - start < .seconds(2), "gave up only after \(ContinuousClock.now - start)")
                try await group.waitForAll()
            }
            #expect(try await count(client, "SELECT count(*)::int FROM push_jobs") == 0)
        }
    }
}
