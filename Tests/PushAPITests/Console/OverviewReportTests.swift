import DeviceRegistry
import Foundation
import Logging
import PostgresNIO
import TestSupport
import Testing

@testable import PushAPI

/// The overview's statements read indexes, never whole tables: checked with sequential scans
/// priced out, so a plan that still has one has no index to use.
@Suite("Console overview report")
struct OverviewReportTests {
    static func plan(_ query: PostgresQuery, _ client: PostgresClient) async throws -> String {
        let explain = PostgresQuery(unsafeSQL: "EXPLAIN " + query.sql, binds: query.binds)
        var lines: [String] = []
        try await client.withConnection { connection in
            _ = try await connection.query("SET enable_seqscan = off", logger: apiLogger)
            for try await line in try await connection.query(explain, logger: apiLogger).decode(String.self) { lines.append(line) }
            _ = try await connection.query("RESET enable_seqscan", logger: apiLogger)
        }
        return lines.joined(separator: "\n")
    }

    @Test func everyStatementReadsAnIndexOfTheBigTables() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        try await database.withClient { client in
            let seed = Seed(client)
            let app = try await seed.app("plan")
            let device = try await seed.device(app: app, user: 1, token: "plan-token")
            let job = try await seed.job(app: "plan", users: [1])
            try await seed.delivery(job: job, device: device, status: .sent)
            for statement in [
                OverviewReport.devicesStatement, OverviewReport.jobsStatement,
                OverviewReport.sendsStatement(from: 1, now: Date()),
            ] {
                let plan = try await Self.plan(statement, client)
                for table in ["push_devices", "push_jobs", "push_deliveries"] {
                    #expect(!plan.contains("Seq Scan on \(table)"), "\(plan)")
                }
            }
        }
    }

    @Test func theDaysFirstDeliveryIsFoundByBisectingThePrimaryKey() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        try await database.withClient { client in
            let seed = Seed(client)
            let app = try await seed.app("days")
            let job = try await seed.job(app: "days", users: [1])
            try await seed.run(
                """
                INSERT INTO push_devices (user_id, app_id, token, platform)
                SELECT g, \(app), 'days-' || g, 'ios' FROM generate_series(1, 1000) g
                """)
            // 1,000 deliveries an hour apart, the newest now: 24 of them (and the one exactly a day old) are in the last day.
            try await seed.run(
                """
                INSERT INTO push_deliveries (job_id, device_id, status, created_at, updated_at, job_created_at, app_id)
                SELECT \(job), d.id, 'sent', now() - (1000 - row_number() OVER (ORDER BY d.id)) * interval '1 hour',
                       now() - (1000 - row_number() OVER (ORDER BY d.id)) * interval '1 hour', (SELECT created_at FROM push_jobs WHERE id = \(job)),
                       d.app_id
                  FROM push_devices d WHERE d.app_id = \(app) ORDER BY d.id
                """)
            let report = OverviewReport(client: client, logger: apiLogger)
            let now = Date()
            let first = try #require(try await report.firstDelivery(createdSince: now.addingTimeInterval(-24 * 3600 + 60)))
            let expected = try await seed.value(
                "SELECT min(id) FROM push_deliveries WHERE created_at >= now() - interval '23 hours 59 minutes'",
                as: Int64.self)
            #expect(first == expected)
            #expect(try await report.firstDelivery(createdSince: now.addingTimeInterval(60)) == nil, "nothing newer than now")
            let activity = try #require(try await report.activity(now: now).first { $0.app.code == "days" })
            #expect(activity.hourlySends.map(\.sent).reduce(0, +) == 24)
            #expect(activity.hourlySends.allSatisfy { $0.sent == 1 })
        }
    }

    @Test func anEmptyDatabaseHasNoDay() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        try await database.withClient { client in
            let first = try await OverviewReport(client: client, logger: apiLogger).firstDelivery(createdSince: Date())
            #expect(first == nil)
        }
    }
}
