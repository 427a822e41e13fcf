import DeviceRegistry

/// Claimed deliveries waiting for a send slot, one lane per job priority, each in claim order.
/// Free slots are filled by smooth weighted round robin over the lanes that hold something
/// (nginx's upstream algorithm): with every lane busy, high gets 16 of 21 slots, normal 4, bulk
/// 1, evenly interleaved; an empty lane's share goes to the others. So a notification to one
/// user takes the next free slot however many campaign deliveries wait, and bulk still moves
/// while high never stops.
struct ReadyLanes {
    static let weights: [JobPriority: Int] = [.high: 16, .normal: 4, .bulk: 1]
    /// The same by lane (rank), for the per-slot loop.
    private static let laneWeights = JobPriority.allCases.map { weights[$0]! }

    private var lanes: [[DeliveryQueue.Claimed]] = Array(repeating: [], count: JobPriority.allCases.count)
    /// Each lane's first waiting delivery: sent ones are dropped from the front now and then.
    private var starts: [Int] = Array(repeating: 0, count: JobPriority.allCases.count)
    private var credits: [Int] = Array(repeating: 0, count: JobPriority.allCases.count)
    private(set) var count = 0

    var isEmpty: Bool { count == 0 }

    /// Every waiting delivery, highest priority first.
    var all: [DeliveryQueue.Claimed] {
        lanes.indices.flatMap { lanes[$0][starts[$0]...] }
    }

    mutating func append(_ delivery: DeliveryQueue.Claimed, priority: JobPriority) {
        lanes[priority.rank].append(delivery)
        count += 1
    }

    /// The delivery the next free slot goes to, and where it waits; nothing changes until
    /// ``remove(lane:index:)``.
    func next() -> (delivery: DeliveryQueue.Claimed, lane: Int, index: Int)? {
        var best: (lane: Int, credit: Int)?
        for lane in lanes.indices where starts[lane] < lanes[lane].endIndex {
            let credit = credits[lane] + Self.laneWeights[lane]
            if best == nil || credit > best!.credit { best = (lane, credit) }
        }
        return best.map { (lanes[$0.lane][starts[$0.lane]], $0.lane, starts[$0.lane]) }
    }

    /// The first waiting delivery, highest priority first, that `passedOver` does not reject, and
    /// where it waits; nothing changes until ``remove(lane:index:)``. For a probe, which is one
    /// delivery chosen by its app, not a share of the slots.
    func first(passingOver passedOver: (DeliveryQueue.Claimed) -> Bool) -> (delivery: DeliveryQueue.Claimed, lane: Int, index: Int)? {
        for lane in lanes.indices {
            if let index = lanes[lane][starts[lane]...].firstIndex(where: { !passedOver($0) }) {
                return (lanes[lane][index], lane, index)
            }
        }
        return nil
    }

    /// Takes the delivery ``next()`` or ``first(passingOver:)`` returned.
    mutating func remove(lane: Int, index: Int) {
        guard index != starts[lane] else { return removeNext(from: lane) }
        lanes[lane].remove(at: index)
        count -= 1
    }

    /// Takes the first delivery of `lane`, as a free slot's share.
    private mutating func removeNext(from lane: Int) {
        var total = 0
        for other in lanes.indices {
            guard starts[other] < lanes[other].endIndex else {
                credits[other] = 0
                continue
            }
            let weight = Self.laneWeights[other]
            credits[other] += weight
            total += weight
        }
        credits[lane] -= total
        starts[lane] += 1
        count -= 1
        if starts[lane] > 256 && starts[lane] * 2 > lanes[lane].count {
            lanes[lane].removeFirst(starts[lane])
            starts[lane] = 0
        }
    }

    /// Marks the waiting deliveries of these jobs as ended: they are recorded, not sent.
    mutating func markEnded(jobs ended: Set<Int64>) {
        for lane in lanes.indices {
            for index in lanes[lane].indices[starts[lane]...]
            where ended.contains(lanes[lane][index].jobID) && lanes[lane][index].jobRunning {
                lanes[lane][index] = lanes[lane][index].ended
            }
        }
    }
}
