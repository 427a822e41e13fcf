import Logging
import PostgresNIO

/// The delivery log's day partitions (sql/015): created a week ahead by push-worker (hourly) and
/// `pushctl migrate`, and dropped with their days' jobs once older than the retention, by
/// push-worker (daily) and `pushctl retention`.
public struct DeliveryPartitions: Sendable {
    /// How many days past today have their partition: a week without any program running before
    /// a row goes to the default partition.
    public static let daysAhead = 7

    let client: PostgresClient
    let logger: Logger

    public init(client: PostgresClient, logger: Logger) {
        self.client = client
        self.logger = logger
    }

    /// Creates the partitions of today and the next ``daysAhead`` days that are missing (and of
    /// any day the default partition holds rows of, moving them in); returns the partitions it
    /// created. Creates nothing while another run is at it.
    public func createAhead() async throws -> [String] {
        let rows = try await DatabaseStatement.run(
            "SELECT push_ensure_delivery_partitions(\(Self.daysAhead)::int)", on: client, logger: logger)
        return try rows.map { try $0.decode(String.self) }
    }

    /// The days older than `days` days, oldest first: each dropped with its jobs, or only said to
    /// be with `dryRun`, or kept, with why (a job of it has not ended).
    public func dropDays(olderThan days: Int, dryRun: Bool) async throws -> [OldDeliveryDay] {
        let rows = try await DatabaseStatement.run(
            """
            SELECT to_char(day, 'YYYY-MM-DD'), deliveries, jobs, dropped, kept_because
              FROM push_drop_old_deliveries(make_interval(days => \(days)::int), \(dryRun))
            """, on: client, logger: logger)
        return try rows.map { row in
            let (day, deliveries, jobs, dropped, keptBecause) = try row.decode((String, Int64, Int64, Bool, String?).self)
            let outcome: OldDeliveryDay.Outcome =
                if let keptBecause { .kept(because: keptBecause) } else if dropped { .dropped } else { .wouldDrop }
            return OldDeliveryDay(day: day, estimatedDeliveries: deliveries, jobs: jobs, outcome: outcome)
        }
    }
}

/// A UTC day of the delivery log older than the retention, and what became of it.
public struct OldDeliveryDay: Sendable, Equatable {
    public enum Outcome: Sendable, Equatable {
        case dropped
        /// A dry run's: it would have been dropped.
        case wouldDrop
        /// Kept whole; the reason names what has not ended.
        case kept(because: String)
    }

    /// `YYYY-MM-DD`.
    public let day: String
    /// The planner's estimate of its partition's rows.
    public let estimatedDeliveries: Int64
    public let jobs: Int64
    public let outcome: Outcome

    public init(day: String, estimatedDeliveries: Int64, jobs: Int64, outcome: Outcome) {
        self.day = day
        self.estimatedDeliveries = estimatedDeliveries
        self.jobs = jobs
        self.outcome = outcome
    }
}
