import Foundation
import PostgresNIO
import TestSupport
import Testing

@testable import PushDispatch

#if canImport(Glibc)
    import Glibc
#endif

/// push-worker keeps the delivery log by itself: a worker starting on a database whose week
/// ahead lacks a day creates it, and drops the days past DELIVERY_RETENTION_DAYS.
@Suite("push-worker's upkeep of the delivery log", .timeLimit(.minutes(2)))
struct DeliveryPartitionMaintenanceTests {
    @Test func aStartingWorkerCreatesTheMissingDayAheadAndDropsTheDaysPastItsRetention() async throws {
        let database = try await TestPostgres.shared.makeDatabase()
        let weekAhead = try await database.text("SELECT 'push_deliveries_' || to_char((now() AT TIME ZONE 'UTC')::date + 7, 'YYYYMMDD')")
        let old = try await database.text("SELECT 'push_deliveries_' || to_char((now() AT TIME ZONE 'UTC')::date - 40, 'YYYYMMDD')")
        try await database.withClient { client in
            try await client.query("DROP TABLE \(unescaped: weekAhead)")
            try await client.query("SELECT push_create_delivery_partition((now() AT TIME ZONE 'UTC')::date - 40)")
            try await client.query("INSERT INTO apps (code, name) VALUES ('wowa', 'Wowa')")
            try await client.query(
                """
                INSERT INTO push_jobs (app_id, message, status, created_at, finished_at)
                VALUES ((SELECT id FROM apps), '{}', 'completed', now() - interval '40 days', now() - interval '40 days')
                """)
        }
        func done() async throws -> Bool {
            try await database.text(
                """
                SELECT (to_regclass(\(weekAhead)) IS NOT NULL AND to_regclass(\(old)) IS NULL
                        AND NOT EXISTS (SELECT FROM push_jobs))::text
                """) == "true"
        }
        #expect(try await !done())

        let worker = try BuiltProduct("push-worker").start(environment: [
            "DATABASE_URL": database.url, "FCM_BASE_URL": "https://127.0.0.1:9", "GOOGLE_TOKEN_URL": "https://127.0.0.1:9/token",
            "DELIVERY_RETENTION_DAYS": "30", "LOG_LEVEL": "info",
        ])
        let deadline = ContinuousClock.now + .seconds(30)
        while try await !done(), ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(100)) }
        #expect(try await done(), "\(worker.log)")
        worker.signal(SIGTERM)
        #expect(await worker.exitStatus(within: .seconds(20)) == 0, "\(worker.log)")
        #expect(worker.log.contains("delivery log partitions created") && worker.log.contains(weekAhead), "\(worker.log)")
        #expect(worker.log.contains("delivery log day dropped with its jobs"), "\(worker.log)")
        #expect(worker.log.contains("push.delivery_retention=\"30 days\""), "\(worker.log)")
    }

    /// A statement the database refuses is logged, an error with its SQLSTATE, and left for the
    /// next tick: the upkeep goes on, and stops when asked.
    @Test func aRefusedStatementIsLoggedAndTheUpkeepGoesOn() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            try await client.query("DROP FUNCTION push_drop_old_deliveries(interval, boolean)")
            let log = CapturedLog()
            let upkeep = DeliveryPartitionMaintenance(client: client, retention: .days(30), logger: log.logger(level: .info))
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { await upkeep.run() }
                let deadline = ContinuousClock.now + .seconds(10)
                while !log.text.contains("database refused a statement, retrying"), ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(50))
                }
                group.cancelAll()
                try await group.waitForAll()
            }
            let refused = log.lines.filter { $0.contains("database refused a statement, retrying") }
            #expect(refused.count == 1 && refused[0].hasPrefix("error ") && refused[0].contains("42883"), "\(log.text)")
        }
    }
}
