import DeviceRegistry
import Testing

@testable import PushDispatch

@Suite("Ready deliveries by priority and job")
struct ReadyLanesTests {
    static func delivery(_ id: Int64, job: Int64) -> DeliveryQueue.Claimed {
        .init(
            lease: .row(id), jobID: job, attempts: 0, deviceID: id, token: "t-\(id)", tokenType: .fcm, deviceActive: true, jobRunning: true)
    }

    /// Takes `count` deliveries as free slots would, returning their job ids.
    static func take(_ lanes: inout ReadyLanes, _ count: Int) -> [Int64] {
        var jobs: [Int64] = []
        for _ in 0..<count {
            guard let (delivery, position) = lanes.next() else { break }
            lanes.remove(position)
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

    /// A campaign sent as `high` (or a job to thousands of users) does not hold a single of its
    /// priority back by all it has claimed: the jobs of a lane take turns.
    @Test func aSingleWaitsForOneDeliveryOfEachOtherJobOfItsPriorityNotForAllClaimedBeforeIt() {
        var lanes = ReadyLanes()
        for id in 1...2000 { lanes.append(Self.delivery(Int64(id), job: 1), priority: .high) }
        #expect(Self.take(&lanes, 5) == [1, 1, 1, 1, 1])
        lanes.append(Self.delivery(9001, job: 2), priority: .high)
        lanes.append(Self.delivery(9002, job: 3), priority: .high)
        #expect(Self.take(&lanes, 4) == [1, 2, 3, 1])
        #expect(lanes.count == 1993)
    }

    @Test func theJobsOfALaneTakeTurnsEachInClaimOrder() {
        var lanes = ReadyLanes()
        for id in 1...9 { lanes.append(Self.delivery(Int64(id), job: Int64(1 + (id - 1) / 3)), priority: .normal) }
        lanes.append(Self.delivery(10, job: 1), priority: .normal)
        var taken: [Int64] = []
        while let (delivery, position) = lanes.next() {
            lanes.remove(position)
            taken.append(delivery.deviceID)
        }
        #expect(taken == [1, 4, 7, 2, 5, 8, 3, 6, 9, 10])
        #expect(lanes.isEmpty && lanes.all.isEmpty)
    }

    @Test func anEmptyLanesShareGoesToTheOthersAndOrderWithinALaneIsKept() {
        var lanes = ReadyLanes()
        for id in 1...10 { lanes.append(Self.delivery(Int64(id), job: Int64(id)), priority: .bulk) }
        #expect(Self.take(&lanes, 10) == Array(1...10))
        #expect(lanes.next() == nil && lanes.isEmpty)
    }

    /// A probe's pick: the first delivery, highest priority first, of a job not passed over,
    /// taken without disturbing the others' turns.
    @Test func aProbeTakesTheFirstDeliveryNotPassedOverWhereverItWaits() throws {
        var lanes = ReadyLanes()
        for id in 1...4 { lanes.append(Self.delivery(Int64(id), job: 1), priority: .high) }
        lanes.append(Self.delivery(5, job: 2), priority: .high)
        lanes.append(Self.delivery(6, job: 2), priority: .high)
        lanes.append(Self.delivery(7, job: 3), priority: .bulk)
        let picked = try #require(lanes.first(passingOver: { $0 == 1 }))
        #expect(picked.delivery.deviceID == 5)
        lanes.remove(picked.position)
        #expect(lanes.count == 6 && lanes.all.map(\.deviceID) == [1, 2, 3, 4, 6, 7])
        // At its turn it is taken as the next free slot's would be.
        let front = try #require(lanes.first(passingOver: { _ in false }))
        lanes.remove(front.position)
        #expect(lanes.all.map(\.deviceID) == [6, 2, 3, 4, 7] && lanes.first(passingOver: { _ in true }) == nil)
        #expect(Self.take(&lanes, 5) == [2, 1, 1, 1, 3] && lanes.isEmpty)
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
