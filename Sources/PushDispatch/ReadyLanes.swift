import DeviceRegistry
import NIOCore

/// Claimed deliveries waiting for a send slot, one lane per job priority. Free slots are filled
/// by smooth weighted round robin over the lanes that hold something (nginx's upstream
/// algorithm): with every lane busy, high gets 16 of 21 slots, normal 4, bulk 1, evenly
/// interleaved; an empty lane's share goes to the others. Within a lane the jobs take turns, a
/// delivery each, each job's in claim order. So a notification to one user waits for one
/// delivery of each other job of its priority, not for everything claimed before it (a campaign
/// sent as `high`, a job to thousands of users), and bulk still moves while high never stops.
struct ReadyLanes {
    static let weights: [JobPriority: Int] = [.high: 16, .normal: 4, .bulk: 1]
    /// The same by lane (rank), for the per-slot loop.
    private static let laneWeights = JobPriority.allCases.map { weights[$0]! }

    /// Where a delivery to take waits: first in its job's queue, in this lane.
    struct Position {
        let lane: Int
        let job: Int64
    }

    /// One priority's waiting deliveries: a queue per job, the jobs in turn order.
    private struct Lane {
        var queues: [Int64: CircularBuffer<DeliveryQueue.Claimed>] = [:]
        /// The jobs with deliveries waiting; the first one's turn is next.
        var turns = CircularBuffer<Int64>()
    }

    private var lanes: [Lane] = Array(repeating: Lane(), count: JobPriority.allCases.count)
    private var credits: [Int] = Array(repeating: 0, count: JobPriority.allCases.count)
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }

    /// Every waiting delivery, highest priority first, each lane's jobs in turn order.
    var all: [DeliveryQueue.Claimed] {
        lanes.flatMap { lane in lane.turns.flatMap { Array(lane.queues[$0]!) } }
    }

    mutating func append(_ delivery: DeliveryQueue.Claimed, priority: JobPriority) {
        let lane = priority.rank
        if lanes[lane].queues[delivery.jobID]?.append(delivery) == nil {
            lanes[lane].queues[delivery.jobID] = [delivery]
            lanes[lane].turns.append(delivery.jobID)
        }
        count += 1
    }

    /// The delivery the next free slot goes to, and where it waits; nothing changes until
    /// ``remove(_:)``.
    func next() -> (delivery: DeliveryQueue.Claimed, position: Position)? {
        var best: (lane: Int, credit: Int)?
        for lane in lanes.indices where !lanes[lane].turns.isEmpty {
            let credit = credits[lane] + Self.laneWeights[lane]
            if best == nil || credit > best!.credit { best = (lane, credit) }
        }
        guard let lane = best?.lane, let job = lanes[lane].turns.first, let delivery = lanes[lane].queues[job]?.first else {
            return nil
        }
        return (delivery, Position(lane: lane, job: job))
    }

    /// The first waiting delivery, highest priority first and then in turn order, of a job
    /// `passedOver` does not reject, and where it waits; nothing changes until ``remove(_:)``.
    /// For a probe, which is one delivery chosen by its app, not a share of the slots.
    func first(passingOver passedOver: (_ job: Int64) -> Bool) -> (delivery: DeliveryQueue.Claimed, position: Position)? {
        for lane in lanes.indices {
            if let job = lanes[lane].turns.first(where: { !passedOver($0) }), let delivery = lanes[lane].queues[job]?.first {
                return (delivery, Position(lane: lane, job: job))
            }
        }
        return nil
    }

    /// Takes the delivery ``next()`` or ``first(passingOver:)`` returned.
    mutating func remove(_ position: Position) {
        let (lane, job) = (position.lane, position.job)
        count -= 1
        guard job == lanes[lane].turns.first else {
            // A probe's pick from a job whose turn has not come: the job keeps its place.
            lanes[lane].queues[job]!.removeFirst()
            if lanes[lane].queues[job]!.isEmpty {
                lanes[lane].queues[job] = nil
                lanes[lane].turns.remove(at: lanes[lane].turns.firstIndex(of: job)!)
            }
            return
        }
        var total = 0
        for other in lanes.indices {
            guard !lanes[other].turns.isEmpty else {
                credits[other] = 0
                continue
            }
            let weight = Self.laneWeights[other]
            credits[other] += weight
            total += weight
        }
        credits[lane] -= total
        lanes[lane].turns.removeFirst()
        lanes[lane].queues[job]!.removeFirst()
        if lanes[lane].queues[job]!.isEmpty {
            lanes[lane].queues[job] = nil
        } else {
            lanes[lane].turns.append(job)
        }
    }

    /// Marks the waiting deliveries of these jobs as ended: they are recorded, not sent.
    mutating func markEnded(jobs ended: Set<Int64>) {
        for lane in lanes.indices {
            for job in ended where lanes[lane].queues[job] != nil {
                for index in lanes[lane].queues[job]!.indices where lanes[lane].queues[job]![index].jobRunning {
                    lanes[lane].queues[job]![index] = lanes[lane].queues[job]![index].ended
                }
            }
        }
    }
}
