import DeviceRegistry
import Logging
import PostgresNIO
import ServiceLifecycle
import ServiceSupport

/// push-worker's care of the delivery log's partitions, on ``DeliveryPartitionSchedule``: the
/// week ahead's are created at start and hourly, so no cron job is needed and rows never wait
/// in the default partition; the days past ``DispatchConfiguration/deliveryRetention`` are
/// dropped at start and daily. Every worker does it; the SQL functions take turns. A database
/// error is logged and the work tried again at the next tick: it never stops the worker.
struct DeliveryPartitionMaintenance: Service, CustomStringConvertible {
    let partitions: DeliveryPartitions
    let retention: DeliveryRetention
    let logger: Logger
    var description: String { "DeliveryPartitionMaintenance(retention: \(retention))" }

    init(client: PostgresClient, retention: DeliveryRetention, logger: Logger) {
        self.partitions = DeliveryPartitions(client: client, logger: logger)
        self.retention = retention
        self.logger = logger
    }

    func run() async {
        await cancelWhenGracefulShutdown { await maintain() }
    }

    private func maintain() async {
        var schedule = DeliveryPartitionSchedule(dropsOldDays: retention != .keepEverything, start: .now)
        while !Task.isCancelled {
            for work in schedule.tick(at: .now) {
                switch work {
                case .createAhead:
                    await createAhead(retryAt: schedule.nextTick)
                case .dropOldDays:
                    if await dropOldDays(retryAt: schedule.nextTick) { schedule.dropped() }
                }
            }
            try? await Task.sleep(until: schedule.nextTick)
        }
    }

    private func createAhead(retryAt nextTick: ContinuousClock.Instant) async {
        do {
            let created = try await partitions.createAhead()
            guard !created.isEmpty else { return }
            logger.info("delivery log partitions created", metadata: ["push.partitions": "\(created.joined(separator: ", "))"])
        } catch {
            logger.databaseRetry(after: error, retryIn: nextTick - .now, task: "creating the delivery log's partitions ahead")
        }
    }

    /// False when the drop failed.
    private func dropOldDays(retryAt nextTick: ContinuousClock.Instant) async -> Bool {
        guard case .days(let days) = retention else { return true }
        do {
            for old in try await partitions.dropDays(olderThan: days, dryRun: false) {
                let metadata: Logger.Metadata = [
                    "push.day": "\(old.day)", "push.deliveries_estimate": "\(old.estimatedDeliveries)", "push.jobs": "\(old.jobs)",
                    "push.retention_days": "\(days)",
                ]
                switch old.outcome {
                case .dropped, .wouldDrop:
                    logger.info("delivery log day dropped with its jobs", metadata: metadata)
                case .kept(let because):
                    logger.notice(
                        "delivery log day kept past its retention", metadata: metadata.merging(["push.kept_because": "\(because)"]) { $1 })
                }
            }
            return true
        } catch {
            logger.databaseRetry(after: error, retryIn: nextTick - .now, task: "dropping the delivery log's expired days")
            return false
        }
    }
}
