import ArgumentParser
import DeviceRegistry
import Foundation
import ServiceSupport

struct Retention: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Drop the delivery log's days older than N days, with their jobs; a day with a job not ended is kept.",
        discussion: """
            push-worker does this once a day with DELIVERY_RETENTION_DAYS; this is the same, on demand. A day goes \
            whole: its deliveries (its partition is dropped) and its jobs, summaries and all. Days are UTC days of \
            the jobs' creation; deliveries are the planner's estimate.
            """)

    @OptionGroup var database: DatabaseOptions
    @Option(help: "Keep this many days (default: DELIVERY_RETENTION_DAYS, else 30).") var days: Int?
    @Flag(help: "Only list what would be dropped.") var dryRun = false

    func run() async throws {
        try await reportingErrors {
            guard case .days(let days) = try retention() else {
                print("DELIVERY_RETENTION_DAYS is off: nothing dropped (give --days N to drop the days older than N)")
                return
            }
            let old = try await withDatabase(database) { client, logger in
                try await DeliveryPartitions(client: client, logger: logger).dropDays(olderThan: days, dryRun: dryRun)
            }
            guard !old.isEmpty else {
                print("no day of the delivery log is older than \(days) days")
                return
            }
            print(
                TextTable.render(
                    header: ["DAY", "DELIVERIES (EST.)", "JOBS", "OUTCOME"],
                    rows: old.map { day in
                        let outcome =
                            switch day.outcome {
                            case .dropped: "dropped"
                            case .wouldDrop: "would drop"
                            case .kept(let because): "kept: \(because)"
                            }
                        return [day.day, String(day.estimatedDeliveries), String(day.jobs), outcome]
                    }))
        }
    }

    /// --days, else DELIVERY_RETENTION_DAYS, else 30 days; checked before the database is touched.
    private func retention() throws -> DeliveryRetention {
        if let days {
            guard DeliveryRetention.allowedDays.contains(days) else {
                throw CLIError(
                    "--days must be a whole number of days in \(DeliveryRetention.allowedDays.lowerBound)...\(DeliveryRetention.allowedDays.upperBound), not \(days)"
                )
            }
            return .days(days)
        }
        return try EnvironmentSettings(ProcessInfo.processInfo.environment, declared: ["DELIVERY_RETENTION_DAYS"]).deliveryRetention()
    }
}
