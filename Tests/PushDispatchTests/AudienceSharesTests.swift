import DeviceRegistry
import Testing

@testable import PushDispatch

@Suite("A claim's room shared among due audiences")
struct AudienceSharesTests {
    static func audience(_ job: Int64, app: Int64, _ priority: JobPriority) -> DeliveryQueue.Audience {
        .init(job: job, app: app, users: nil, platforms: nil, priority: priority)
    }

    static func shares(_ plan: [(audience: DeliveryQueue.Audience, limit: Int)]) -> [Int64: Int] {
        Dictionary(plan.map { ($0.audience.job, $0.limit) }, uniquingKeysWith: +)
    }

    @Test func highPriorityJobsComeFirstAndBulkStillGetsItsShare() {
        let plan = AudienceShares.plan([Self.audience(1, app: 1, .high), Self.audience(2, app: 1, .bulk)], room: 2048)
        #expect(plan.map(\.audience.job) == [1, 2])
        // 16 : 1 of the room while both wait: what the high job does not use is planned again.
        #expect(Self.shares(plan) == [1: 1927, 2: 120])
    }

    @Test func twoAppsCampaignsShareTheRoomAndAnAppsJobsShareItsPart() {
        let plan = AudienceShares.plan(
            [Self.audience(1, app: 1, .bulk), Self.audience(2, app: 1, .bulk), Self.audience(3, app: 2, .bulk)], room: 2048)
        // Apps alike, whatever their number of jobs; app 1's second campaign runs beside its first.
        #expect(Self.shares(plan) == [1: 512, 2: 512, 3: 1024])
    }

    /// A notification to one user queued while a campaign sent as `high` (or a job to thousands
    /// of users) of its app is still being expanded: the high-priority claim after its NOTIFY
    /// takes it beside the campaign, not after the campaign's last device.
    @Test func aSingleIsClaimedBesideALargeJobOfItsOwnAppAndPriority() {
        let plan = AudienceShares.plan(
            [Self.audience(1, app: 1, .high), Self.audience(2, app: 1, .high), Self.audience(3, app: 2, .high)],
            room: DispatchStateMachine.urgentClaim(concurrency: 1024))
        #expect(Self.shares(plan) == [1: 64, 2: 64, 3: 128])
    }

    /// A job's share is an expansion statement: an app's part goes to its jobs a chunk at least.
    @Test func jobsOfAnAppASmallRoomLeavesOutComeFirstTheNextTime() {
        let audiences = (1...40).map { Self.audience(Int64($0), app: 1, .normal) }
        let first = AudienceShares.plan(audiences, room: 160, turn: 0)
        #expect(first.map(\.audience.job) == [1, 2, 3] && first.map(\.limit) == [64, 64, 32])
        #expect(AudienceShares.plan(audiences, room: 160, turn: 1).map(\.audience.job) == [2, 3, 4])
        #expect(AudienceShares.plan(audiences, room: 160, turn: 39).map(\.audience.job) == [40, 1, 2])
    }

    /// Three apps of three bulk campaigns each beside a high-priority job: bulk's share reaches
    /// two apps a claim, and every job gets its turn (an app's jobs rotated with the apps' turn
    /// would give app 2 only ever its second job).
    @Test func everyJobOfEveryAppGetsATurnWhenTheShareReachesOnlySomeApps() {
        var audiences = [Self.audience(41, app: 4, .high)]
        for app in 1...3 { audiences += (1...3).map { Self.audience(Int64(10 * app + $0), app: Int64(app), .bulk) } }
        var served: Set<Int64> = []
        for turn in 0..<9 {
            let plan = AudienceShares.plan(audiences, room: 512, turn: turn)
            #expect(plan.filter { $0.audience.priority == .bulk }.count == 2)
            served.formUnion(plan.map(\.audience.job))
        }
        #expect(served == [11, 12, 13, 21, 22, 23, 31, 32, 33, 41])
    }
}
