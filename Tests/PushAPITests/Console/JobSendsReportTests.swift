import DeviceRegistry
import Foundation
import PostgresNIO
import TestSupport
import Testing

@testable import PushAPI

@Suite("Console job sends over time")
struct JobSendsReportTests {
    /// 2026-11-21 14:00:00 UTC.
    static let base = Date(timeIntervalSince1970: 1_795_269_600)

    static func slots(_ from: Double, _ through: Double) -> TimeSlots {
        TimeSlots(from: base.addingTimeInterval(from), through: base.addingTimeInterval(through))
    }

    @Test func slotsAreTheSmallestRoundLengthThatKeepsSixtyBars() {
        let seconds = Self.slots(3, 40)
        #expect(seconds == TimeSlots(start: Self.base.addingTimeInterval(3), seconds: 1, count: 38) && seconds.name == "second")
        let twoSeconds = Self.slots(3, 120)
        #expect(twoSeconds.start == Self.base.addingTimeInterval(2) && twoSeconds.seconds == 2 && twoSeconds.count == 60)
        #expect(twoSeconds.name == "2 seconds" && twoSeconds.end == Self.base.addingTimeInterval(122))
        let hours = Self.slots(3, 3 * 3600)
        #expect(hours == TimeSlots(start: Self.base, seconds: 300, count: 37) && hours.name == "5 minutes")
        let days = Self.slots(0, 3 * 86400)
        #expect(days == TimeSlots(start: Self.base, seconds: 7200, count: 37) && days.name == "2 hours")
        #expect(Self.slots(0, 40 * 86400).name == "day")
        for (span, name) in [(365.0 * 86400, "week"), (3650 * 86400, "9 weeks")] {
            let slots = Self.slots(0, span)
            #expect(slots.name == name && slots.count <= TimeSlots.maximumCount)
            #expect(slots.start <= Self.base && slots.end > Self.base.addingTimeInterval(span))
            #expect(Int(slots.start.timeIntervalSince1970) % slots.seconds == 0)
        }
        #expect(Self.slots(10, 0) == TimeSlots(start: Self.base.addingTimeInterval(10), seconds: 1, count: 1), "an end before the start")
    }

    @Test func axisLabelsAreAsPreciseAsTheSlots() {
        func label(_ slots: TimeSlots) -> String {
            JobSends(slots: slots, counts: []).label(slots.start)
        }
        #expect(label(Self.slots(3, 40)) == "14:00:03")
        #expect(label(Self.slots(3, 3 * 3600)) == "14:00")
        #expect(label(Self.slots(9.5 * 3600, 10.5 * 3600)) == "11-21 23:30", "a span across midnight says the day")
        #expect(label(Self.slots(0, 3 * 86400)) == "11-21 14:00")
        #expect(label(Self.slots(0, 40 * 86400)) == "11-21")
        #expect(label(Self.slots(0, 365 * 86400)) == "2026-11-19", "weeks start on the Thursday 1970 started on")
    }

    @Test func aJobsChartIsLabelledWithItsSlotsAndTimes() {
        var sends = JobSends(slots: Self.slots(0, 40), counts: [SendCounts](repeating: SendCounts(), count: 41))
        sends.counts[10] = SendCounts(sent: 3, failed: 1)
        let svg = sends.chart(id: "sends").svg
        #expect(
            svg.contains(
                #"<title id="sends-title">Sends of this job by second, from 2026-11-21 14:00:00 UTC to 2026-11-21 14:00:41 UTC</title>"#))
        #expect(svg.contains("sent 3, failed 1, skipped 0, waiting to retry 0; busiest second 4"))
        #expect(svg.contains("<title>14:00:10: 3 sent</title>") && svg.contains("<title>14:00:10: 1 failed</title>"))
        #expect(svg.matches(of: /<text x="[0-9.]+" y="134">/).count == 4, "four labels under 41 bars")
        #expect(svg.contains(">14:00:00</text>") && svg.contains(#"text-anchor="end">14:00:41</text>"#))
    }

    /// Deliveries of a job that ran 40 s: counted in the second of their first outcome, those a
    /// moment outside the span in its first or last second, another job's not at all.
    @Test func aJobsDeliveriesAreCountedInTheSlotOfTheirFirstOutcome() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        try await database.withClient { client in
            let seed = Seed(client)
            let app = try await seed.app("span")
            var devices: [Int64] = []
            for user in 1...6 { devices.append(try await seed.device(app: app, user: Int64(user), token: "span-token-\(user)")) }
            let (job, other) = (try await seed.job(app: "span", users: [1]), try await seed.job(app: "span", users: [1]))
            let start = Self.base.timeIntervalSince1970
            try await seed.run(
                """
                UPDATE push_jobs SET status = 'completed', audience_complete = true, started_at = to_timestamp(\(start)),
                       finished_at = to_timestamp(\(start + 40)) WHERE id = \(job)
                """)
            for (device, status, offset) in [
                (devices[0], "sent", 0.2), (devices[1], "failed", 0.7), (devices[2], "sent", 10.5), (devices[3], "pending", 40),
                (devices[4], "skipped", -3), (devices[5], "sent", 45),
            ] {
                try await seed.run(
                    """
                    INSERT INTO push_deliveries (job_id, device_id, status, created_at, updated_at, job_created_at, app_id)
                    SELECT \(job), \(device), \(status), to_timestamp(\(start + offset)), to_timestamp(\(start + offset)), created_at, app_id
                      FROM push_jobs WHERE id = \(job)
                    """)
            }
            try await seed.run(
                """
                INSERT INTO push_deliveries (job_id, device_id, status, created_at, job_created_at, app_id)
                SELECT \(other), \(devices[0]), 'sent', to_timestamp(\(start + 5)), created_at, app_id FROM push_jobs WHERE id = \(other)
                """)
            let report = JobSendsReport(client: client, logger: apiLogger)
            let sends = try #require(try await report.sends(job: job))
            #expect(sends.slots == TimeSlots(start: Self.base, seconds: 1, count: 41))
            var expected = [SendCounts](repeating: SendCounts(), count: 41)
            expected[0] = SendCounts(sent: 1, failed: 1, skipped: 1)
            expected[10] = SendCounts(sent: 1)
            expected[40] = SendCounts(sent: 1, pending: 1)
            #expect(sends.counts == expected)

            let scheduled = try await JobDirectory(client: client, logger: apiLogger).enqueue(
                appCode: "span", userIDs: [1], platforms: nil, message: #"{"notification":{"title":"later"}}"#, idempotencyKey: nil,
                sendAt: Date().addingTimeInterval(3600), dryRun: false
            ).id
            let now = Date()
            let notYet = try #require(try await report.sends(job: scheduled, now: now))
            #expect(notYet.slots.count == 1 && notYet.slots.start <= now && notYet.total == SendCounts(), "not due: one empty slot, now")
            #expect(try await report.sends(job: 999_999) == nil)
        }
    }

    /// The counts read the job's deliveries through its index, as the planner chooses with the
    /// statistics of 50,000 deliveries of 1,000 jobs; and with sequential scans priced out, the
    /// plan has no scan of a whole table. One connection throughout, so that ANALYZE follows the
    /// inserts and the plans follow ANALYZE.
    @Test func theCountsReadTheJobsIndexNotTheLog() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        try await database.withClient { client in
            let app = try await Seed(client).app("plan")
            try await client.withConnection { connection in
                func run(_ query: PostgresQuery) async throws {
                    for try await _ in try await connection.query(query, logger: apiLogger) {}
                }
                func plan(_ query: PostgresQuery, sequentialScans: Bool) async throws -> String {
                    if !sequentialScans { try await run("SET enable_seqscan = off") }
                    var lines: [String] = []
                    let explain = PostgresQuery(unsafeSQL: "EXPLAIN " + query.sql, binds: query.binds)
                    for try await line in try await connection.query(explain, logger: apiLogger).decode(String.self) { lines.append(line) }
                    try await run("RESET enable_seqscan")
                    return lines.joined(separator: "\n")
                }
                try await run(
                    """
                    INSERT INTO push_devices (user_id, app_id, token, platform)
                    SELECT g, \(app), 'plan-token-' || g, 'android' FROM generate_series(1, 50) g
                    """)
                try await run(
                    """
                    INSERT INTO push_jobs (app_id, message, status, audience_complete, started_at, finished_at)
                    SELECT \(app), '{"notification":{"title":"plan"}}', 'completed', true, now() - interval '1 hour', now()
                      FROM generate_series(1, 1000)
                    """)
                try await run(
                    """
                    INSERT INTO push_deliveries (job_id, device_id, status, job_created_at, app_id)
                    SELECT j.id, d.id, 'sent', j.created_at, j.app_id FROM push_jobs j CROSS JOIN push_devices d WHERE d.app_id = \(app)
                    """)
                try await run("ANALYZE push_deliveries")
                var job: Int64 = 0
                for try await id in try await connection.query("SELECT id FROM push_jobs ORDER BY id OFFSET 500 LIMIT 1", logger: apiLogger)
                    .decode(Int64.self)
                {
                    job = id
                }
                let statement = JobSendsReport.countsStatement(job: job, slots: Self.slots(0, 3600))
                let planned = try await plan(statement, sequentialScans: true)
                #expect(
                    planned.contains("_job_id_status_id_idx") || planned.contains("_job_id_id_idx")
                        || planned.contains("_job_id_device_id_job_created_at_key"), "\(planned)")
                #expect(QueryPlan.sequentialScansWithPages(in: planned).isEmpty, "\(planned)")
                let forced = try await plan(statement, sequentialScans: false)
                #expect(QueryPlan.sequentialScansWithPages(in: forced).isEmpty, "\(forced)")
                let span = try await plan(JobSendsReport.spanStatement(job: job), sequentialScans: false)
                #expect(QueryPlan.sequentialScansWithPages(in: span).isEmpty, "\(span)")
            }
        }
    }
}
