import DeviceRegistry
import Synchronization

/// What the send loop has decided and the writer has not yet written: delivery results,
/// finished chunks, device deactivations, failed jobs, jobs that may have finished. The send loop never waits
/// for the database to write; the writer takes everything at once and writes it in a few
/// statements.
final class Outbox: Sendable {
    struct Batch: Sendable {
        var results: [DeliveryQueue.Result] = []
        var deactivations: [(deviceID: Int64, reason: DeactivationReason)] = []
        var jobFailures: [(job: Int64, reason: String)] = []
        var touchedJobs: Set<Int64> = []
        /// Chunks whose every device has its result in this batch or an earlier one.
        var finishedChunks: [Int64] = []
        /// Apps whose project a send just proved (the first success per project in this worker).
        var provenProjects: [(appID: Int64, projectID: String)] = []
        /// For the urgent outbox, written apart and at once rather than gathered for the writer's
        /// interval: results someone waits for (a high-priority job's). Only routes a batch.
        var urgent = false

        var isEmpty: Bool {
            results.isEmpty && deactivations.isEmpty && jobFailures.isEmpty && touchedJobs.isEmpty && finishedChunks.isEmpty
                && provenProjects.isEmpty
        }

        mutating func merge(_ other: Batch) {
            results += other.results
            deactivations += other.deactivations
            jobFailures += other.jobFailures
            touchedJobs.formUnion(other.touchedJobs)
            finishedChunks += other.finishedChunks
            provenProjects += other.provenProjects
        }
    }

    private let state = Mutex<(batch: Batch, closed: Bool)>((Batch(), false))
    /// Wakes the writer early when a batch is full, or when the outbox closes; at every
    /// addition for an urgent outbox.
    let full = WakeSignal()
    static let batchSize = 512
    /// High-priority results, with their own writer: never behind a campaign's batch.
    let urgent: Bool

    init(urgent: Bool = false) {
        self.urgent = urgent
    }

    func add(_ change: (inout Batch) -> Void) {
        let count = state.withLock { state in
            change(&state.batch)
            return state.batch.results.count
        }
        if count >= Self.batchSize || urgent { full.signal() }
    }

    func take() -> (batch: Batch, closed: Bool) {
        state.withLock { state in
            defer { state.batch = Batch() }
            return (state.batch, state.closed)
        }
    }

    /// A write failed: keep its content for the next try.
    func putBack(_ batch: Batch) {
        state.withLock { state in
            var restored = batch
            restored.merge(state.batch)
            state.batch = restored
        }
    }

    /// No more additions: the writer writes what is left and stops.
    func close() {
        state.withLock { $0.closed = true }
        full.signal()
    }
}
