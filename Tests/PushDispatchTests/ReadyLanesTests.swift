import DeviceRegistry
import Testing

@testable import PushDispatch

@Suite("Ready deliveries by priority")
struct ReadyLanesTests {
    static func delivery(_ id: Int64, job: Int64) -> DeliveryQueue.Claimed {
        .init(
            lease: .row(id), jobID: job, attempts: 0, deviceID: id, token: "t-\(id)", tokenType: .fcm, deviceActive: true, jobRunning: true)
    }

    /// Takes `count` deliveries as free slots would, returning their job ids.
    static func take(_ lanes: inout ReadyLanes, _ count: Int) -> [Int64] {
        var jobs: [Int64] = []
        for _ in 0..<count {
            guard let (delivery, lane, index) = lanes.next() else { break }
            lanes.remove(lane: lane, index: index)
            jobs.append(delivery.jobID)
        }
        return jobs
    }

    @Test func aHighPriorityDeliveryTakesTheNextSlotWhateverWaitsBeforeIt() {
        var lanes = ReadyLanes()
        for id in 1...2000 { lanes.append(Self.delivery(Int64(id), job: 1), priority: .bulk) }
        #expect(Self.take(&lanes, 5) == [1, 1, 1, 1, 1])
        lanes.append(Self.delivery(9001, job: 2), priority: .high)
        #expect(Self.take(&lanes, 1) == [2])
        #expect(lanes.count == 1995)
    }

    @Test func everyPriorityMovesInProportionToItsWeight() {
        var lanes = ReadyLanes()
        for id in 1...1000 {
            lanes.append(Self.delivery(Int64(id), job: 1), priority: .high)
            lanes.append(Self.delivery(Int64(10_000 + id), job: 2), priority: .normal)
            lanes.append(Self.delivery(Int64(20_000 + id), job: 3), priority: .bulk)
        }
        let taken = Self.take(&lanes, 210)
        // 16 : 4 : 1 while all three wait; bulk is never starved.
        #expect(taken.filter { $0 == 1 }.count == 160)
        #expect(taken.filter { $0 == 2 }.count == 40)
        #expect(taken.filter { $0 == 3 }.count == 10)
        // Interleaved, not in runs: bulk goes out within every 21 slots.
        #expect(taken.prefix(21).contains(3))
    }

    @Test func anEmptyLanesShareGoesToTheOthersAndOrderWithinALaneIsKept() {
        var lanes = ReadyLanes()
        for id in 1...10 { lanes.append(Self.delivery(Int64(id), job: Int64(id)), priority: .bulk) }
        #expect(Self.take(&lanes, 10) == Array(1...10))
        #expect(lanes.next() == nil && lanes.isEmpty)
    }

    /// A probe's pick: the first delivery, highest priority first, not passed over, taken from
    /// the middle of its lane without disturbing the others' order.
    @Test func aProbeTakesTheFirstDeliveryNotPassedOverWhereverItWaits() throws {
        var lanes = ReadyLanes()
        for id in 1...4 { lanes.append(Self.delivery(Int64(id), job: 1), priority: .high) }
        lanes.append(Self.delivery(5, job: 2), priority: .high)
        lanes.append(Self.delivery(6, job: 2), priority: .bulk)
        let picked = try #require(lanes.first(passingOver: { $0.jobID == 1 }))
        #expect(picked.delivery.deviceID == 5)
        lanes.remove(lane: picked.lane, index: picked.index)
        #expect(lanes.count == 5 && lanes.all.map(\.deviceID) == [1, 2, 3, 4, 6])
        // At a lane's front it is taken as the next free slot's would be.
        let front = try #require(lanes.first(passingOver: { _ in false }))
        lanes.remove(lane: front.lane, index: front.index)
        #expect(lanes.all.map(\.deviceID) == [2, 3, 4, 6] && lanes.first(passingOver: { _ in true }) == nil)
        #expect(Self.take(&lanes, 4) == [1, 1, 1, 2] && lanes.isEmpty)
    }

    @Test func endedJobsAreMarkedWhereverTheyWait() {
        var lanes = ReadyLanes()
        lanes.append(Self.delivery(1, job: 1), priority: .high)
        lanes.append(Self.delivery(2, job: 2), priority: .bulk)
        lanes.append(Self.delivery(3, job: 2), priority: .bulk)
        lanes.markEnded(jobs: [2])
        #expect(lanes.all.map(\.jobRunning) == [true, false, false])
        #expect(lanes.all.map(\.deviceID) == [1, 2, 3])
    }
}
