import DeviceRegistry
import Foundation
import Testing

@testable import PushDispatch

/// The send loop's decisions without a socket or a database: events in, actions out.
@Suite("Dispatch state machine")
struct DispatchStateMachineTests {
    static let account = ServiceAccount(projectID: "p", clientEmail: "e", privateKeyPEM: "k", privateKeyID: nil)
    static func job(_ id: Int64 = 1, account: ServiceAccount? = account) -> DeliveryQueue.Job {
        .init(id: id, appID: 7, appCode: "wowa", message: PreparedMessage(messageJSON: "{}", validateOnly: false), account: account,
              projectProven: true)
    }

    static func delivery(_ device: Int64, job: Int64 = 1, chunk: Int64? = nil, active: Bool = true, running: Bool = true,
                         attempts: Int = 0) -> DeliveryQueue.Claimed {
        .init(lease: chunk.map { .chunk($0) } ?? .row(device), jobID: job, attempts: attempts, deviceID: device, token: "token-\(device)",
              tokenType: .fcm, deviceActive: active, jobRunning: running)
    }

    let start = ContinuousClock.now
    func at(_ seconds: Double) -> ContinuousClock.Instant { start + .milliseconds(Int(seconds * 1000)) }

    func machine(concurrency: Int = 8, longestOutage: Duration = .seconds(3600)) -> DispatchStateMachine {
        var machine = DispatchStateMachine(concurrency: concurrency, policy: DeliveryPolicy(maxAttempts: 5),
                                           reachability: FCMReachability(longestOutage: longestOutage, jitter: { 1 }))
        machine.jobsLoaded([Self.job()], now: at(0))
        return machine
    }

    static func sent(_ actions: [DispatchStateMachine.Action]) -> [Int64] {
        actions.flatMap { action -> [Int64] in
            guard case .send(let claims, _) = action else { return [] }
            return claims.map(\.claimed.deviceID)
        }
    }

    static func written(_ actions: [DispatchStateMachine.Action]) -> Outbox.Batch {
        var batch = Outbox.Batch()
        for case .write(let part) in actions { batch.merge(part) }
        return batch
    }

    static func counted(_ actions: [DispatchStateMachine.Action]) -> [String] {
        actions.compactMap { if case .countSend(_, let outcome) = $0 { outcome } else { nil } }
    }

    func answer(_ delivery: DeliveryQueue.Claimed, _ answer: FCMClient.Answer, probe: Bool = false) -> DispatchStateMachine.Attempt {
        .init(claimed: delivery, job: Self.job(), result: .success(answer), probe: probe)
    }

    @Test func claimsWhatIsFreeOnceHalfIsFreeAndFollowsAnswersOnlyWhileClaimsFindWork() {
        var machine = machine()
        #expect(machine.nextStep(now: at(0), stopping: false) == .claim(limit: 8, probe: false))
        let claimed = (1...8).map { Self.delivery($0) }
        #expect(Self.sent(machine.claimed(claimed, limit: 8, probe: false)) == Array(1...8))
        #expect(machine.running == 8 && machine.nextStep(now: at(0), stopping: false) == .wait)
        // Each answer frees its slot; a claim follows once half are free.
        for delivery in claimed.prefix(3) { _ = machine.answered(answer(delivery, .answered(.sent(messageID: "m"), elapsed: .milliseconds(30))), now: at(0)) }
        #expect(machine.nextStep(now: at(0), stopping: false) == .wait)
        _ = machine.answered(answer(claimed[3], .answered(.sent(messageID: "m"), elapsed: .milliseconds(30))), now: at(0))
        #expect(machine.nextStep(now: at(0), stopping: false) == .claim(limit: 4, probe: false))
        // That claim finds less than it asked for: the next waits for a hint (NOTIFY, the poll interval).
        _ = machine.claimed([Self.delivery(9)], limit: 4, probe: false)
        for delivery in claimed.suffix(4) { _ = machine.answered(answer(delivery, .answered(.sent(messageID: "m"), elapsed: nil)), now: at(0)) }
        #expect(machine.nextStep(now: at(0), stopping: false) == .wait)
        machine.hinted()
        #expect(machine.nextStep(now: at(0), stopping: false) == .claim(limit: 7, probe: false))
        // Stopping: nothing more is claimed, and the loop ends once the last answer is in.
        #expect(machine.nextStep(now: at(0), stopping: true) == .wait)
        _ = machine.answered(answer(Self.delivery(9), .answered(.sent(messageID: "m"), elapsed: nil)), now: at(0))
        #expect(machine.nextStep(now: at(0), stopping: true) == .stop)
    }

    @Test func deliveriesThatNeedNoSendAreSettledAndWhatDoesNotFitIsHeldBack() {
        var machine = machine(concurrency: 4)
        machine.jobsLoaded([Self.job(2, account: nil)], now: at(0))
        let claimed = [Self.delivery(1, active: false), Self.delivery(2, running: false), Self.delivery(3, job: 2), Self.delivery(4, job: 2),
                       Self.delivery(5), Self.delivery(6, chunk: 40), Self.delivery(7, chunk: 40)]
        let actions = machine.claimed(claimed, limit: 6, probe: false)
        #expect(Self.sent(actions) == [5, 6])
        #expect(machine.heldBack.map(\.deviceID) == [7])
        #expect(actions.contains { if case .keepLeased(let leases) = $0 { leases == [.chunk(40)] } else { false } })
        let written = Self.written(actions)
        #expect(written.results.map { "\($0.deviceID) \($0.status) \($0.errorCode ?? "-") \($0.attempted)" }
                    == ["1 skipped DEVICE_INACTIVE false", "2 pending JOB_ENDED false", "3 failed NO_CREDENTIALS false", "4 failed NO_CREDENTIALS false"])
        // The job without credentials fails once, not once per device.
        #expect(written.jobFailures.map(\.job) == [2])
        #expect(written.jobFailures.first?.reason == "app wowa: no FCM credentials (pushctl app set-credentials --code wowa)")
        #expect(machine.running == 2)
        #expect(machine.takeHeldBack(upTo: 10).map(\.deviceID) == [7] && machine.heldBack.isEmpty)
    }

    @Test func aChunkIsDeletedWithItsLastResult() {
        var machine = machine()
        let chunk = [Self.delivery(1, chunk: 9), Self.delivery(2, chunk: 9)]
        machine.leased(chunk)
        _ = machine.claimed(chunk, limit: 8, probe: false)
        let first = Self.written(machine.answered(answer(chunk[0], .answered(.sent(messageID: "m1"), elapsed: .milliseconds(20))), now: at(0)))
        #expect(first.results.map(\.status) == ["sent"] && first.results.first?.messageID == "m1" && first.finishedChunks.isEmpty)
        let last = Self.written(machine.answered(answer(chunk[1], .answered(.deadToken(errorCode: "UNREGISTERED", message: "gone", reason: "unregistered"), elapsed: nil)), now: at(0)))
        #expect(last.finishedChunks == [9] && last.deactivations.map(\.deviceID) == [2] && last.touchedJobs == [1])
    }

    @Test func anUnreachableFCMStopsClaimsUntilAProbeFindsItBack() {
        var machine = machine()
        let claimed = (1...4).map { Self.delivery($0) }
        _ = machine.claimed(claimed, limit: 8, probe: false)
        machine.hinted()
        let refused = machine.answered(answer(claimed[0], .notSent(reason: "connect: refused", unreachable: true)), now: at(0))
        let retry = Self.written(refused).results.first
        // Pending without an attempt, due when the breaker lets the next probe out.
        #expect(retry?.status == "pending" && retry?.errorCode == "FCM_UNREACHABLE" && retry?.attempted == false)
        #expect(Self.counted(refused) == ["not_sent"])
        #expect(machine.nextStep(now: at(0.5), stopping: false) == .wait)
        // A send that was written and never answered spends an attempt, counted apart.
        let lost = machine.answered(answer(claimed[1], .answered(.noAnswer(message: "connection closed"), elapsed: nil)), now: at(0.5))
        #expect(Self.written(lost).results.first.map { "\($0.status) \($0.errorCode ?? "-") \($0.attempted)" } == "pending NO_ANSWER true")
        #expect(Self.counted(lost) == ["no_answer"])
        for delivery in claimed.suffix(2) { _ = machine.answered(answer(delivery, .notSent(reason: "refused", unreachable: true)), now: at(0.6)) }
        #expect(machine.nextStep(now: at(1), stopping: false) == .claim(limit: 1, probe: true))
        _ = machine.claimed([claimed[0]], limit: 1, probe: true)
        #expect(machine.nextStep(now: at(1.1), stopping: false) == .wait)
        _ = machine.answered(answer(claimed[0], .answered(.sent(messageID: "m"), elapsed: .milliseconds(40)), probe: true), now: at(1.2))
        #expect(machine.reachability.isReachable)
        machine.hinted()
        #expect(machine.nextStep(now: at(1.2), stopping: false) == .claim(limit: 8, probe: false))
    }

    @Test func pastTheLongestOutageTheDeliveryAndItsJobFail() {
        var machine = machine(longestOutage: .seconds(2))
        let claimed = [Self.delivery(1), Self.delivery(2)]
        _ = machine.claimed(claimed, limit: 8, probe: false)
        _ = machine.answered(answer(claimed[0], .notSent(reason: "connect: refused", unreachable: true)), now: at(0))
        let late = Self.written(machine.answered(answer(claimed[1], .notSent(reason: "connect: refused", unreachable: true), probe: true), now: at(3)))
        #expect(late.results.first.map { "\($0.status) \($0.errorCode ?? "-") \($0.attempted)" } == "failed FCM_UNREACHABLE false")
        #expect(late.jobFailures.first?.reason == "app wowa: FCM unreachable for over 2 s: connect: refused")
        #expect(machine.failedJobs == [1])
    }

    @Test func quotaAndTokenEndpointWaitsPauseTheApp() {
        var machine = machine()
        let claimed = [Self.delivery(1), Self.delivery(2)]
        _ = machine.claimed(claimed, limit: 8, probe: false)
        let quota = machine.answered(answer(claimed[0], .answered(.transient(errorCode: "QUOTA_EXCEEDED", message: "slow down", retryAfter: .seconds(90), quota: true), elapsed: .milliseconds(5))), now: at(0))
        #expect(Self.written(quota).results.first?.attempted == true && Self.counted(quota) == ["retry"])
        #expect(machine.pausedApps(now: at(89)) == [7] && machine.pausedApps(now: at(91)).isEmpty)
        let token = machine.answered(.init(claimed: claimed[1], job: Self.job(), result: .failure(.transient("HTTP 503", retryAfter: .seconds(4))), probe: false), now: at(100))
        #expect(Self.written(token).results.first.map { "\($0.status) \($0.errorCode ?? "-") \($0.attempted)" } == "pending OAUTH_UNAVAILABLE false")
        #expect(machine.pausedApps(now: at(103)) == [7] && machine.pausedApps(now: at(105)).isEmpty)
    }

    @Test func jobsAreReadAgainWhenStaleAndForgottenWhenIdle() {
        var machine = machine()
        #expect(machine.staleJobs([1, 2], now: at(1)) == [2])
        #expect(machine.staleJobs([1], now: at(6)) == [1])
        machine.jobsLoaded([Self.job(2)], now: at(61))
        // Job 1, not claimed for a minute, is forgotten: its deliveries would be read afresh.
        #expect(machine.staleJobs([1, 2], now: at(62)) == [1])
    }
}
