import DeviceRegistry
import Foundation
import PostgresNIO
import Testing
import TestSupport

@Suite("DeliveryLog: the audit log, newest first, by keyset")
struct DeliveryLogTests {
    func withScenario(_ body: @Sendable (DeliveryLog, AuditScenario, PostgresClient) async throws -> Void) async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            try await body(DeliveryLog(client: client, logger: testLogger), try await AuditScenario.seed(client), client)
        }
    }

    @Test func everyFilterSelectsItsRowsNewestFirst() async throws {
        try await withScenario { log, scenario, _ in
            for query in AuditScenario.queries {
                var streamed: [Int64] = []
                try await log.each(query.filter(scenario)) { streamed.append($0.id) }
                #expect(streamed == query.expectedIDs(scenario), "\(query)")
                let page = try await log.page(query.filter(scenario), below: nil, limit: 100)
                #expect(page.deliveries.map(\.id) == query.expectedIDs(scenario) && page.nextCursor == nil, "\(query)")
            }
        }
    }

    @Test func recordsCarryTheWorkersColumnsAndAMaskedToken() async throws {
        try await withScenario { log, scenario, _ in
            let records = try await log.page(DeliveryFilter(jobID: scenario.jobs[0]), below: nil, limit: 10).deliveries
            try #require(records.count == 2)
            let (failed, sent) = (records[0], records[1])
            #expect(failed.status == .failed && failed.errorCode == AuditScenario.failure.code
                    && failed.errorMessage == AuditScenario.failure.message && failed.attempts == 2 && failed.fcmMessageID == nil)
            #expect(failed.userID == 2 && failed.appCode == "wowa" && failed.platform == .android && failed.deviceID == scenario.devices[1])
            #expect(failed.maskedToken == AuditScenario.masked(1) && failed.maskedToken == "wowa-user2-android-t…")
            #expect(sent.fcmMessageID == "projects/wowa/messages/0:1" && sent.errorCode == nil && sent.jobID == scenario.jobs[0])
            #expect(sent.updatedAt == ISO8601Time.parse("2020-06-01T00:00:00Z") && sent.createdAt > sent.updatedAt)
        }
    }

    @Test func pagesChainByCursorAndTheLastPageHasNone() async throws {
        try await withScenario { log, scenario, _ in
            let ids = scenario.deliveries
            // 5 rows by 2: [4,3] [2,1] [0].
            let first = try await log.page(DeliveryFilter(), below: nil, limit: 2)
            #expect(first.deliveries.map(\.id) == [ids[4], ids[3]] && first.nextCursor == ids[3])
            let second = try await log.page(DeliveryFilter(), below: first.nextCursor, limit: 2)
            #expect(second.deliveries.map(\.id) == [ids[2], ids[1]] && second.nextCursor == ids[1])
            let last = try await log.page(DeliveryFilter(), below: second.nextCursor, limit: 2)
            #expect(last.deliveries.map(\.id) == [ids[0]] && last.nextCursor == nil)
            // Exactly `limit` rows left: no cursor to an empty page.
            let exact = try await log.page(DeliveryFilter(), below: nil, limit: 5)
            #expect(exact.deliveries.count == 5 && exact.nextCursor == nil)
            let exactTail = try await log.page(DeliveryFilter(), below: ids[2], limit: 2)
            #expect(exactTail.deliveries.map(\.id) == [ids[1], ids[0]] && exactTail.nextCursor == nil)
            let oneShort = try await log.page(DeliveryFilter(), below: nil, limit: 4)
            #expect(oneShort.deliveries.count == 4 && oneShort.nextCursor == ids[1])
            // The cursor combines with a filter: user 1 is [3,2,0].
            let filtered = try await log.page(DeliveryFilter(userID: 1), below: ids[3], limit: 1)
            #expect(filtered.deliveries.map(\.id) == [ids[2]] && filtered.nextCursor == ids[2])
            let beyond = try await log.page(DeliveryFilter(), below: ids[0], limit: 10)
            #expect(beyond.deliveries.isEmpty && beyond.nextCursor == nil)
        }
    }

    @Test func eachHonoursLimitAndCursorAndStopsOnTheCallersError() async throws {
        struct Stop: Error {}
        try await withScenario { log, scenario, _ in
            var seen: [Int64] = []
            try await log.each(DeliveryFilter(), below: scenario.deliveries[4], limit: 2) { seen.append($0.id) }
            #expect(seen == [scenario.deliveries[3], scenario.deliveries[2]])
            seen = []
            await #expect(throws: Stop.self) {
                try await log.each(DeliveryFilter()) { seen.append($0.id); if seen.count == 2 { throw Stop() } }
            }
            #expect(seen.count == 2)
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
                    try await jobs.enqueue(appCode: app, userIDs: [1], platforms: nil, message: message, idempotencyKey: nil, sendAt: nil, dryRun: false)
                }
            }
            // An unset variable in a cron line must not become a key that swallows every later run.
            for key in ["", String(repeating: "k", count: 201)] {
                for userIDs: [Int64]? in [[1], nil] {
                    await #expect(throws: EnqueueRejected(description: "idempotency key must be 1 to 200 characters (leave it out for none)")) {
                        try await jobs.enqueue(appCode: "wowa", userIDs: userIDs, platforms: nil, message: "{}", idempotencyKey: key, sendAt: nil,
                                               dryRun: false)
                    }
                }
            }
            await #expect(throws: EnqueueRejected.self) {
                try await jobs.enqueue(appCode: "wowa", userIDs: nil, platforms: nil, message: "not json", idempotencyKey: nil, sendAt: nil, dryRun: false)
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
                _ = try await jobs.enqueue(appCode: "wowa", userIDs: [1], platforms: nil, message: message, idempotencyKey: nil, sendAt: nil,
                                           dryRun: false)
            }
            #expect(try await count(client, "SELECT count(*)::int FROM push_jobs") == 2)
        }
    }

    /// A rehearsal must not swallow the real send: the same key with the other dry-run setting is refused.
    @Test func aDryRunAndARealSendNeverShareAnIdempotencyKey() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            _ = try await addApp(client)
            let jobs = JobDirectory(client: client, logger: testLogger)
            func enqueue(dryRun: Bool) async throws -> Int64 {
                try await jobs.enqueue(appCode: "wowa", userIDs: nil, platforms: nil, message: #"{"notification":{"title":"t"}}"#,
                                       idempotencyKey: "daily-digest-2026-11-21", sendAt: nil, dryRun: dryRun)
            }
            let rehearsal = try await enqueue(dryRun: true)
            #expect(try await enqueue(dryRun: true) == rehearsal)
            await #expect(throws: EnqueueRejected(description:
                #"idempotency key "daily-digest-2026-11-21" was used by dry-run job \#(rehearsal); give the real send its own key"#)) {
                try await enqueue(dryRun: false)
            }
            #expect(try await count(client, "SELECT count(*)::int FROM push_jobs") == 1)
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
            _ = try await client.query("INSERT INTO push_devices (user_id, app_id, token, platform) SELECT g, \(app), 'expand-' || g, 'ios' FROM generate_series(1, 50) g")
            let job = try await JobDirectory(client: client, logger: testLogger).enqueue(
                appCode: "wowa", userIDs: nil, platforms: nil, message: #"{"notification":{"title":"t"}}"#, idempotencyKey: nil, sendAt: nil, dryRun: false)
            _ = try await client.query("UPDATE push_jobs SET status = 'running' WHERE id = \(job)")
            try await withThrowingTaskGroup(of: Void.self) { group in
                try await client.withTransaction(logger: testLogger) { expander in
                    _ = try await expander.query("SELECT id FROM push_jobs WHERE id = \(job) FOR UPDATE", logger: testLogger)
                    group.addTask { () async throws in
                        let outcome = try await JobDirectory(client: client, logger: testLogger).cancel(job)
                        #expect(outcome == .cancelled)
                    }
                    try await Task.sleep(for: .milliseconds(300))  // the cancel is now waiting for the row
                    _ = try await expander.query("INSERT INTO push_deliveries (job_id, device_id) SELECT \(job), id FROM push_devices", logger: testLogger)
                }
                try await group.waitForAll()
            }
            #expect(try await count(client, "SELECT count(*)::int FROM push_deliveries WHERE status = 'pending'") == 0)
            #expect(try await count(client, "SELECT count(*)::int FROM push_deliveries WHERE status = 'skipped' AND error_code = 'CANCELLED'") == 50)
        }
    }
}
