import DeviceRegistry
import Foundation
import Testing

@testable import PushDispatch

/// The send loop's decisions without a socket or a database: events in, actions out.
@Suite("Dispatch state machine")
struct DispatchStateMachineTests {
    static let account = ServiceAccount(projectID: "p", clientEmail: "e", privateKeyPEM: "k", privateKeyID: nil)
    static func job(_ id: Int64 = 1, account: ServiceAccount? = account) -> DeliveryQueue.Job {
        .init(
            id: id, appID: 7, appCode: "wowa", message: PreparedMessage(messageJSON: "{}", validateOnly: false), account: account,
            projectProven: true)
    }

    static func delivery(
        _ device: Int64, job: Int64 = 1, chunk: Int64? = nil, active: Bool = true, running: Bool = true,
        attempts: Int = 0
    ) -> DeliveryQueue.Claimed {
        .init(
            lease: chunk.map { .chunk($0) } ?? .row(device), jobID: job, attempts: attempts, deviceID: device, token: "token-\(device)",
            tokenType: .fcm, deviceActive: active, jobRunning: running)
    }

    let start = ContinuousClock.now
    func at(_ seconds: Double) -> ContinuousClock.Instant { start + .milliseconds(Int(seconds * 1000)) }

    func machine(concurrency: Int = 8, longestOutage: Duration = .seconds(3600)) -> DispatchStateMachine {
        DispatchStateMachine(
            concurrency: concurrency, policy: DeliveryPolicy(maxAttempts: 5),
            reachability: FCMReachability(longestOutage: longestOutage, jitter: { 1 }))
    }

    static func claimRequest(_ actions: [DispatchStateMachine.Action]) -> DispatchStateMachine.ClaimRequest? {
        for case .claim(let request) in actions { return request }
        return nil
    }

    /// Polls (after a hint if `hinted`), expecting a claim; answers it with `claimed` (and
    /// `jobs` read, `running` of the rechecked jobs); polls again. The claim's request, and that
    /// poll's actions.
    func claimRound(
        _ machine: inout DispatchStateMachine, _ claimed: [DeliveryQueue.Claimed],
        jobs: [DeliveryQueue.Job] = [DispatchStateMachineTests.job()],
        running: Set<Int64> = [], at now: Double = 0, hinted: Bool = false
    ) throws -> (request: DispatchStateMachine.ClaimRequest, actions: [DispatchStateMachine.Action]) {
        if hinted { machine.hinted() }
        let request = try #require(Self.claimRequest(machine.poll(now: at(now), stopping: false).actions))
        let result = DispatchStateMachine.ClaimResult(
            claimed: claimed, loadedJobs: jobs.filter { !request.freshJobs.contains($0.id) },
            runningJobs: running, cursor: request.cursor)
        var actions = machine.claimed(result, for: request, now: at(now))
        actions += machine.poll(now: at(now), stopping: false).actions
        return (request, actions)
    }

    /// `claimRound`'s actions.
    func claim(
        _ machine: inout DispatchStateMachine, _ claimed: [DeliveryQueue.Claimed],
        jobs: [DeliveryQueue.Job] = [DispatchStateMachineTests.job()],
        running: Set<Int64> = [], at now: Double = 0
    ) throws -> [DispatchStateMachine.Action] {
        try claimRound(&machine, claimed, jobs: jobs, running: running, at: now).actions
    }

    /// After a hint at `second`: the claim that follows finds `claimed`. The apps that claim
    /// left out, and what the next poll does.
    func claimAfterHint(
        _ machine: inout DispatchStateMachine, _ claimed: [DeliveryQueue.Claimed], at second: Double
    ) throws -> (leftOut: [Int64], actions: [DispatchStateMachine.Action]) {
        let round = try claimRound(&machine, claimed, jobs: [], at: second, hinted: true)
        return (round.request.pausedApps, round.actions)
    }

    static func sent(_ actions: [DispatchStateMachine.Action]) -> [Int64] {
        actions.flatMap { action -> [Int64] in
            guard case .send(let claims, _, _) = action else { return [] }
            return claims.map(\.claimed.deviceID)
        }
    }

    static func written(_ actions: [DispatchStateMachine.Action]) -> Outbox.Batch {
        var batch = Outbox.Batch()
        for case .write(let part) in actions { batch.merge(part) }
        return batch
    }

    static func counted(_ actions: [DispatchStateMachine.Action]) -> [String] {
        actions.compactMap { if case .countSend(_, let outcome, _) = $0 { outcome } else { nil } }
    }

    /// The log lines among the actions, as "level message".
    static func logged(_ actions: [DispatchStateMachine.Action]) -> [String] {
        actions.compactMap { if case .log(let level, let message, _) = $0 { "\(level) \(message)" } else { nil } }
    }

    /// An attempt of job 1, its send left at `sent` seconds.
    func answer(
        _ delivery: DeliveryQueue.Claimed, _ answer: FCMClient.Answer, probe: Bool = false, sent: Double = 0
    ) -> DispatchStateMachine.Attempt {
        .init(claimed: delivery, job: Self.job(), result: .success(answer), probe: probe, sentAt: at(sent))
    }

    @Test func claimsAheadAndRefillsEachSlotAsItsAnswerComes() throws {
        var machine = machine()
        let first = try #require(Self.claimRequest(machine.poll(now: at(0), stopping: false).actions))
        // Idle: twice the capacity, so that the next slots are refilled from what is ready.
        #expect(first.limit == 16)
        let claimed = (1...16).map { Self.delivery($0) }
        var actions = machine.claimed(
            .init(claimed: claimed, loadedJobs: [Self.job()], runningJobs: [], cursor: first.cursor), for: first, now: at(0))
        #expect(actions.contains { if case .keepLeased(let leases) = $0 { leases.count == 16 } else { false } })
        actions = machine.poll(now: at(0), stopping: false).actions
        #expect(Self.sent(actions) == Array(1...8) && machine.running == 8 && machine.waiting.count == 8)
        // 16 held: no claim until at most one and a half capacities are.
        #expect(Self.claimRequest(actions) == nil)
        // One answer, one send: the slot is refilled at once.
        _ = machine.answered(answer(claimed[0], .answered(.sent(messageID: "m"), elapsed: .milliseconds(30))), now: at(0.01))
        actions = machine.poll(now: at(0.01), stopping: false).actions
        #expect(Self.sent(actions) == [9] && Self.claimRequest(actions) == nil)
        for delivery in claimed[1..<4] {
            _ = machine.answered(answer(delivery, .answered(.sent(messageID: "m"), elapsed: .milliseconds(30))), now: at(0.02))
        }
        actions = machine.poll(now: at(0.02), stopping: false).actions
        #expect(Self.sent(actions) == [10, 11, 12])
        // 8 in flight and 4 ready: the next claim starts while those still cover the next answers,
        // and asks for what brings it back to twice the capacity. It also checks the ready ones' job.
        let next = try #require(Self.claimRequest(actions))
        #expect(next.limit == 4 && next.recheckJobs == [1] && next.freshJobs == [1])
        // Only one claim at a time.
        #expect(Self.claimRequest(machine.poll(now: at(0.02), stopping: false).actions) == nil)
        // It finds less than it asked for: the next one waits for a hint (NOTIFY, the poll interval).
        _ = machine.claimed(
            .init(claimed: [Self.delivery(17)], loadedJobs: [], runningJobs: [1], cursor: next.cursor), for: next, now: at(0.03))
        for delivery in claimed[4..<8] {
            _ = machine.answered(answer(delivery, .answered(.sent(messageID: "m"), elapsed: nil)), now: at(0.04))
        }
        actions = machine.poll(now: at(0.04), stopping: false).actions
        #expect(Self.sent(actions) == [13, 14, 15, 16] && Self.claimRequest(actions) == nil)
        machine.hinted()
        #expect(Self.claimRequest(machine.poll(now: at(0.04), stopping: false).actions)?.limit == 7)
    }

    @Test func stoppingClaimsAndSendsNothingMoreAndEndsWhenTheLastAnswerIsIn() throws {
        var machine = machine(concurrency: 2)
        let claimed = [Self.delivery(1), Self.delivery(2), Self.delivery(3)]
        #expect(Self.sent(try claim(&machine, claimed)) == [1, 2])
        #expect(machine.poll(now: at(0), stopping: true).done == false)
        _ = machine.answered(answer(claimed[0], .answered(.sent(messageID: "m"), elapsed: nil)), now: at(0))
        let (actions, done) = machine.poll(now: at(0), stopping: true)
        #expect(actions.isEmpty && !done)
        _ = machine.answered(answer(claimed[1], .answered(.sent(messageID: "m"), elapsed: nil)), now: at(0))
        #expect(machine.poll(now: at(0), stopping: true).done)
        // The one never sent is handed to the next worker.
        #expect(machine.waiting.map(\.deviceID) == [3])
    }

    @Test func deliveriesThatNeedNoSendAreSettledNotSent() throws {
        var machine = machine(concurrency: 8)
        let claimed = [
            Self.delivery(1, active: false), Self.delivery(2, running: false), Self.delivery(3, job: 2), Self.delivery(4, job: 2),
            Self.delivery(5), Self.delivery(6, chunk: 40),
        ]
        let actions = try claim(&machine, claimed, jobs: [Self.job(), Self.job(2, account: nil)])
        #expect(Self.sent(actions) == [5, 6])
        let written = Self.written(actions)
        #expect(
            written.results.map { "\($0.deviceID) \($0.status) \($0.errorCode?.rawValue ?? "-") \($0.attempted)" }
                == [
                    "1 skipped DEVICE_INACTIVE false", "3 failed NO_CREDENTIALS false", "2 pending JOB_ENDED false",
                    "4 failed NO_CREDENTIALS false",
                ])
        // The job without credentials fails once, not once per device.
        #expect(written.jobFailures.map(\.job) == [2])
        #expect(written.jobFailures.first?.reason == "app wowa: no FCM credentials (pushctl app set-credentials --code wowa)")
        #expect(actions.contains { if case .forgetLeased(let leases) = $0 { leases.count == 4 } else { false } })
        #expect(machine.running == 2 && machine.waiting.isEmpty)
    }

    @Test func readyDeliveriesOfAJobThatEndedAreNeverSent() throws {
        var machine = machine(concurrency: 2)
        let claimed = (1...6).map { Self.delivery($0) }
        #expect(Self.sent(try claim(&machine, claimed)) == [1, 2])
        // The answers come after the job was last seen running: the ready ones wait for a check.
        _ = machine.answered(answer(claimed[0], .answered(.sent(messageID: "m"), elapsed: nil)), now: at(1))
        var actions = machine.poll(now: at(1), stopping: false).actions
        #expect(Self.sent(actions).isEmpty)
        let check = try #require(Self.claimRequest(actions))
        #expect(check.recheckJobs == [1])
        // It was cancelled meanwhile: they are recorded as its ending says, not sent.
        actions = machine.claimed(.init(claimed: [], loadedJobs: [], runningJobs: [], cursor: check.cursor), for: check, now: at(1))
        actions += machine.poll(now: at(1), stopping: false).actions
        // They take no slot: all are settled at once.
        #expect(Self.sent(actions).isEmpty)
        #expect(
            Self.written(actions).results.map { "\($0.deviceID) \($0.errorCode?.rawValue ?? "-")" } == [
                "3 JOB_ENDED", "4 JOB_ENDED", "5 JOB_ENDED", "6 JOB_ENDED",
            ])
        #expect(machine.waiting.isEmpty && machine.running == 1)
    }

    /// A job's ending announced (its NOTIFY) stops its sends at once: the ready deliveries are
    /// recorded as the ending says, and those of a claim that read the job running before its
    /// ending are too, where the job would otherwise count as seen running for a while more.
    @Test func anEndingAnnouncedStopsTheJobsSendsAtOnce() throws {
        var machine = machine(concurrency: 2)
        let claimed = (1...6).map { Self.delivery($0) }
        #expect(Self.sent(try claim(&machine, claimed)) == [1, 2])
        machine.hinted()
        let claim = try #require(Self.claimRequest(machine.poll(now: at(0.01), stopping: false).actions))
        machine.jobsEnded([1], now: at(0.02))
        _ = machine.answered(answer(claimed[0], Self.sent), now: at(0.02))
        var actions = machine.poll(now: at(0.02), stopping: false).actions
        #expect(Self.sent(actions).isEmpty)
        #expect(
            Self.written(actions).results.compactMap { $0.errorCode.map { "\($0)" } } == Array(repeating: "JOB_ENDED", count: 4))
        actions = machine.claimed(
            .init(claimed: (7...8).map { Self.delivery($0) }, loadedJobs: [], runningJobs: [1], cursor: claim.cursor), for: claim,
            now: at(0.03))
        actions += machine.poll(now: at(0.03), stopping: false).actions
        #expect(Self.sent(actions).isEmpty && Self.written(actions).results.map(\.deviceID) == [7, 8])
        #expect(machine.waiting.isEmpty && machine.running == 1)
    }

    @Test func aChunkIsDeletedWithItsLastResult() throws {
        var machine = machine()
        let chunk = [Self.delivery(1, chunk: 9), Self.delivery(2, chunk: 9)]
        _ = try claim(&machine, chunk)
        let first = Self.written(
            machine.answered(answer(chunk[0], .answered(.sent(messageID: "m1"), elapsed: .milliseconds(20))), now: at(0)))
        #expect(first.results.map(\.status) == [.sent] && first.results.first?.messageID == "m1" && first.finishedChunks.isEmpty)
        let last = Self.written(
            machine.answered(
                answer(chunk[1], .answered(.deadToken(errorCode: .unregistered, message: "gone", reason: .unregistered), elapsed: nil)),
                now: at(0)))
        #expect(last.finishedChunks == [9] && last.deactivations.map(\.deviceID) == [2] && last.touchedJobs == [1])
    }

    @Test func anUnreachableFCMStopsSendsUntilAProbeFindsItBack() throws {
        var machine = machine()
        let claimed = (1...12).map { Self.delivery($0) }
        #expect(Self.sent(try claim(&machine, claimed)).count == 8)
        let refused = machine.answered(answer(claimed[0], .notSent(reason: "connect: refused", unreachable: true)), now: at(0))
        let retry = Self.written(refused).results.first
        // Pending without an attempt, due when the breaker lets the next probe out.
        #expect(retry?.status == .pending && retry?.errorCode == .fcmUnreachable && retry?.attempted == false)
        #expect(Self.counted(refused) == ["not_sent"])
        // The operator reads one warning for the outage, not one per delivery.
        #expect(
            Self.logged(refused) == [
                "warning FCM cannot be reached; sending waits for it (no attempts spent), probing from 1 s to a minute"
            ])
        // Nothing is sent or claimed while the breaker is open.
        #expect(machine.poll(now: at(0.05), stopping: false).actions.isEmpty)
        // A send that was written and never answered spends an attempt, counted apart.
        let lost = machine.answered(answer(claimed[1], .answered(.noAnswer(message: "connection closed"), elapsed: nil)), now: at(0.05))
        #expect(
            Self.written(lost).results.first.map { "\($0.status) \($0.errorCode?.rawValue ?? "-") \($0.attempted)" }
                == "pending NO_ANSWER true")
        #expect(Self.counted(lost) == ["no_answer"])
        #expect(Self.logged(lost).count == 1)
        for delivery in claimed[2..<8] {
            #expect(Self.logged(machine.answered(answer(delivery, .notSent(reason: "refused", unreachable: true)), now: at(0.06))).isEmpty)
        }
        // The wait over, one ready delivery goes as the probe (its job checked first).
        var actions = machine.poll(now: at(1), stopping: false).actions
        let check = try #require(Self.claimRequest(actions))
        actions = machine.claimed(.init(claimed: [], loadedJobs: [], runningJobs: [1], cursor: check.cursor), for: check, now: at(1))
        actions += machine.poll(now: at(1), stopping: false).actions
        #expect(
            actions.contains { if case .send(let claims, probe: true, _) = $0 { claims.map(\.claimed.deviceID) == [9] } else { false } })
        #expect(Self.sent(machine.poll(now: at(1.01), stopping: false).actions).isEmpty)
        let back = machine.answered(
            answer(claimed[8], .answered(.sent(messageID: "m"), elapsed: .milliseconds(40)), probe: true), now: at(1.02))
        #expect(machine.reachability.isReachable)
        #expect(Self.logged(back) == ["notice FCM answers again; sending resumes"])
        #expect(Self.sent(machine.poll(now: at(1.02), stopping: false).actions) == [10, 11, 12])
    }

    @Test func pastTheLongestOutageTheDeliveryAndItsJobFail() throws {
        var machine = machine(longestOutage: .seconds(2))
        let claimed = [Self.delivery(1), Self.delivery(2)]
        _ = try claim(&machine, claimed)
        _ = machine.answered(answer(claimed[0], .notSent(reason: "connect: refused", unreachable: true)), now: at(0))
        let late = Self.written(
            machine.answered(answer(claimed[1], .notSent(reason: "connect: refused", unreachable: true), probe: true), now: at(3)))
        #expect(
            late.results.first.map { "\($0.status) \($0.errorCode?.rawValue ?? "-") \($0.attempted)" } == "failed FCM_UNREACHABLE false")
        #expect(late.jobFailures.first?.reason == "app wowa: FCM unreachable for over 2 s: connect: refused")
        #expect(machine.failedJobs == [1])
    }

    @Test func anAcceptedSendWhoseAnswerNamesNoMessageIsSentCountedApartAndWarnedOnce() throws {
        var machine = machine()
        let claimed = [Self.delivery(1), Self.delivery(2)]
        _ = try claim(&machine, claimed)
        var warnings = 0
        for delivery in claimed {
            let actions = machine.answered(
                answer(delivery, .answered(.sentUnreadable(body: "<html>"), elapsed: .milliseconds(9))), now: at(0))
            #expect(Self.written(actions).results.first.map { "\($0.status) \($0.messageID ?? "-")" } == "sent -")
            #expect(Self.counted(actions) == ["sent_unreadable"])
            warnings += actions.count { if case .log(.warning, _, _) = $0 { true } else { false } }
        }
        #expect(warnings == 1)
    }

    @Test func unansweredSendsAreWarnedAboutOnceAMinuteWithTheirCount() throws {
        var machine = machine(concurrency: 9)
        let claimed = (1...9).map { Self.delivery($0) }
        _ = try claim(&machine, claimed)
        func lose(_ delivery: DeliveryQueue.Claimed, at seconds: Double) -> [DispatchStateMachine.Action] {
            machine.answered(answer(delivery, .answered(.noAnswer(message: "no answer within 30 s"), elapsed: nil)), now: at(seconds))
        }
        func unansweredCount(_ actions: [DispatchStateMachine.Action]) -> String? {
            for case .log(.warning, _, let metadata) in actions { return metadata["push.unanswered"].map { "\($0)" } }
            return nil
        }
        let warning = "warning FCM did not answer sends written to it; each spends an attempt and is retried, so a phone may get it twice"
        #expect(Self.logged(lose(claimed[0], at: 0)) == [warning])
        for (index, delivery) in claimed[1..<5].enumerated() {
            #expect(Self.logged(lose(delivery, at: 1 + Double(index))).isEmpty)
        }
        // A minute on, the next one is logged with the four held back and itself.
        let next = lose(claimed[5], at: 60)
        #expect(Self.logged(next) == [warning])
        #expect(unansweredCount(next) == "5")
        #expect(Self.logged(lose(claimed[6], at: 61)).isEmpty)
        // An answer that came is no news.
        #expect(
            Self.logged(machine.answered(answer(claimed[7], .answered(.sent(messageID: "m"), elapsed: .milliseconds(9))), now: at(62)))
                .isEmpty)
        // After a burst, with none more: the one held back is told when its minute is over.
        #expect(Self.logged(machine.poll(now: at(119), stopping: false).actions).isEmpty)
        let after = machine.poll(now: at(120), stopping: false).actions
        #expect(Self.logged(after) == [warning] && unansweredCount(after) == "1")
        #expect(Self.logged(machine.poll(now: at(125), stopping: false).actions).isEmpty)
        // At a stop, within the minute.
        #expect(Self.logged(lose(claimed[8], at: 130)).isEmpty)
        let stop = machine.poll(now: at(131), stopping: true).actions
        #expect(Self.logged(stop) == [warning] && unansweredCount(stop) == "1")
    }

    /// Connections that died: some sends unanswered, then FCM unreachable. The count held back
    /// is told when its minute is over, though the breaker holds every send then.
    @Test func unansweredSendsHeldBackAreToldWhileFCMCannotBeReached() throws {
        var machine = machine(concurrency: 4)
        let claimed = (1...4).map { Self.delivery($0) }
        _ = try claim(&machine, claimed)
        for (index, delivery) in claimed[0..<3].enumerated() {
            _ = machine.answered(
                answer(delivery, .answered(.noAnswer(message: "connection closed"), elapsed: nil)), now: at(Double(index)))
        }
        _ = machine.answered(answer(claimed[3], .notSent(reason: "connect: refused", unreachable: true)), now: at(59.5))
        #expect(machine.reachability.admission(now: at(60.2)) == .closed)
        let told = machine.poll(now: at(60.2), stopping: false).actions
        #expect(
            told.contains { if case .log(.warning, _, let metadata) = $0 { metadata["push.unanswered"] == "2" } else { false } },
            "\(Self.logged(told))")
    }

    /// A brown-out: once most of FCM's answers are server errors, a server error spends no
    /// attempt and opens the breaker, as an unreachable FCM does. Only a probe closes it (the next
    /// server error opens it again, without a line); when server errors are no longer most
    /// answers, FCM is back and a server error spends an attempt again.
    @Test func whenMostAnswersAreServerErrorsTheyWaitForTheBreakerWithoutSpendingAttempts() throws {
        var machine = machine(concurrency: 32)
        let claimed = (1...40).map { Self.delivery($0) }
        #expect(Self.sent(try claim(&machine, claimed)).count == 32)
        let unavailable = FCMClient.Answer.answered(
            .transient(errorCode: .unavailable, message: "The service is currently unavailable.", retryAfter: nil, quota: false),
            elapsed: .milliseconds(20))
        let sent = FCMClient.Answer.answered(.sent(messageID: "m"), elapsed: .milliseconds(20))
        // A few 503s among answers that went through: each spends an attempt, as one device's would.
        for delivery in claimed[0..<12] { _ = machine.answered(answer(delivery, sent), now: at(0.1)) }
        for delivery in claimed[12..<23] {
            let result = Self.written(machine.answered(answer(delivery, unavailable), now: at(0.2))).results.first
            #expect(result?.status == .pending && result?.attempted == true)
        }
        #expect(machine.reachability.isReachable)
        // The 503 that makes them half of the last 24 answers: no attempt, the breaker opens, one warning.
        let tipping = machine.answered(answer(claimed[23], unavailable), now: at(0.3))
        #expect(
            Self.written(tipping).results.first.map { "\($0.status) \($0.errorCode?.rawValue ?? "-") \($0.attempted)" }
                == "pending UNAVAILABLE false")
        #expect(
            Self.logged(tipping) == [
                "warning FCM answers most sends with server errors; sending waits for it (no attempts spent), probing from 1 s to a minute"
            ])
        #expect(!machine.reachability.isReachable)
        for delivery in claimed[24..<28] {
            let later = machine.answered(answer(delivery, unavailable), now: at(0.31))
            #expect(Self.written(later).results.first?.attempted == false && Self.logged(later).isEmpty)
        }
        // An answer sent before the breaker opened leaves it open, and lets nothing out.
        let stale = machine.answered(answer(claimed[28], sent), now: at(0.32))
        #expect(Self.logged(stale).isEmpty && Self.sent(stale).isEmpty && !machine.reachability.isReachable)
        let again = machine.answered(answer(claimed[29], unavailable), now: at(0.33))
        #expect(Self.written(again).results.first?.attempted == false && Self.logged(again).isEmpty)
        for delivery in claimed[30..<32] { #expect(Self.logged(machine.answered(answer(delivery, sent), now: at(0.34))).isEmpty) }
        let held = machine.poll(now: at(0.5), stopping: false).actions
        #expect(Self.sent(held).isEmpty, "the breaker holds the ready ones")
        if let check = Self.claimRequest(held) {
            _ = machine.claimed(.init(claimed: [], loadedJobs: [], runningJobs: [1], cursor: check.cursor), for: check, now: at(0.5))
        }
        // The probe goes through, and the ready ones after it; server errors are still most answers.
        var actions = machine.poll(now: at(1.5), stopping: false).actions
        if let check = Self.claimRequest(actions) {
            actions = machine.claimed(.init(claimed: [], loadedJobs: [], runningJobs: [1], cursor: check.cursor), for: check, now: at(1.5))
            actions += machine.poll(now: at(1.5), stopping: false).actions
        }
        #expect(
            actions.contains { if case .send(let claims, probe: true, _) = $0 { claims.map(\.claimed.deviceID) == [33] } else { false } })
        let afterProbe = machine.answered(answer(claimed[32], sent, probe: true, sent: 1.5), now: at(1.6))
        #expect(Self.logged(afterProbe).isEmpty && machine.reachability.isReachable)
        #expect(Self.sent(afterProbe) + Self.sent(machine.poll(now: at(1.6), stopping: false).actions) == Array(34...40))
        // Answers through until server errors are fewer than half: FCM is back, said once.
        var lines: [String] = []
        for delivery in claimed[33..<35] { lines += Self.logged(machine.answered(answer(delivery, sent, sent: 1.6), now: at(1.7))) }
        #expect(lines == ["notice FCM answers again; sending resumes"], "\(lines)")
        // With a few more through, a 503 spends an attempt again.
        for delivery in claimed[35..<37] { _ = machine.answered(answer(delivery, sent, sent: 1.6), now: at(1.75)) }
        let next = machine.answered(answer(claimed[37], unavailable), now: at(1.8))
        #expect(Self.written(next).results.first?.attempted == true && machine.reachability.isReachable)
    }

    /// Server errors for longer than the longest outage fail the deliveries and their jobs, however
    /// often the breaker closed meanwhile. But a 503 long after a brown-out whose sends stopped
    /// (nothing answered for five minutes) is one device's, not the brown-out going on past its bound.
    @Test func aBrownOutLongerThanTheLongestOutageFailsTheJobButNotOneLongOver() throws {
        func serverErrorAfterABrownOut(at second: Double) throws -> (written: Outbox.Batch, reachable: Bool) {
            var machine = machine(concurrency: 32, longestOutage: .seconds(10))
            let claimed = (1...32).map { Self.delivery($0) }
            _ = try claim(&machine, claimed)
            let unavailable = FCMClient.Answer.answered(
                .transient(errorCode: .unavailable, message: "The service is currently unavailable.", retryAfter: nil, quota: false),
                elapsed: .milliseconds(20))
            for delivery in claimed[0..<16] { _ = machine.answered(answer(delivery, unavailable), now: at(0)) }
            _ = machine.answered(answer(claimed[16], .answered(.sent(messageID: "m"), elapsed: .milliseconds(20))), now: at(5))
            let written = Self.written(machine.answered(answer(claimed[17], unavailable), now: at(second)))
            return (written, machine.reachability.isReachable)
        }
        let within = try serverErrorAfterABrownOut(at: 11).written
        #expect(within.results.first.map { "\($0.status) \($0.errorCode?.rawValue ?? "-")" } == "failed UNAVAILABLE")
        #expect(within.jobFailures.first?.reason.hasPrefix("app wowa: FCM answered server errors for over 10 s") == true)
        let (long, reachable) = try serverErrorAfterABrownOut(at: 5 + 301)
        #expect(long.results.first.map { "\($0.status) \($0.errorCode?.rawValue ?? "-") \($0.attempted)" } == "pending UNAVAILABLE true")
        #expect(long.jobFailures.isEmpty && reachable)
    }

    /// FCM failing one app's project while it answers another's well: that app alone waits,
    /// paused on a breaker of its own (no attempts spent), the other sends on and its own server
    /// errors are one device's again; the app resumes once its answers are no longer mostly
    /// server errors. Two apps failing together are FCM's brown-out, as before.
    @Test func serverErrorsOfOneAppWhileFCMAnswersAnotherWellPauseThatAppOnly() throws {
        var machine = machine(concurrency: 64)
        let sick = (1...40).map { Self.delivery($0, job: 1) }
        let well = (41...64).map { Self.delivery($0, job: 2) }
        let jobs = [Self.job(1), Self.otherAppsJob(2)]
        #expect(Self.sent(try claim(&machine, sick + well, jobs: jobs)).count == 64)
        func answer(
            _ delivery: DeliveryQueue.Claimed, _ answer: FCMClient.Answer, at second: Double, sent: Double = 0
        ) -> [DispatchStateMachine.Action] {
            machine.answered(
                .init(claimed: delivery, job: jobs[Int(delivery.jobID) - 1], result: .success(answer), probe: false, sentAt: at(sent)),
                now: at(second))
        }
        let sent = FCMClient.Answer.answered(.sent(messageID: "m"), elapsed: .milliseconds(20))
        // Its first fifteen 503s spend an attempt each, as one device's would; FCM takes the
        // other app's sends meanwhile.
        #expect(Self.written(answer(sick[0], Self.unavailable, at: 0.05)).results.first?.attempted == true)
        for delivery in well[0..<20] { _ = answer(delivery, sent, at: 0.1) }
        for delivery in sick[1..<15] { #expect(Self.written(answer(delivery, Self.unavailable, at: 0.2)).results.first?.attempted == true) }
        // The sixteenth: the app's brown-out, said once, for the app only.
        let tipping = answer(sick[15], Self.unavailable, at: 0.3)
        #expect(
            Self.written(tipping).results.first.map { "\($0.status) \($0.attempted) \($0.nextAttempt > Date())" } == "pending false true")
        #expect(
            Self.logged(tipping) == [
                "warning FCM answers most of the app's sends with server errors and other apps' well; the app's sending waits (no attempts spent), the others go on"
            ])
        #expect(machine.reachability.isReachable && machine.pausedApps(now: at(0.3)) == [7])
        for delivery in sick[16..<40] {
            let held = answer(delivery, Self.unavailable, at: 0.35)
            #expect(Self.written(held).results.first?.attempted == false && Self.logged(held).isEmpty)
        }
        // The other app's own 503 is one device's: an attempt, no breaker.
        #expect(Self.written(answer(well[20], Self.unavailable, at: 0.4)).results.first?.attempted == true)
        #expect(machine.reachability.isReachable && machine.pausedApps(now: at(0.4)) == [7])
        // After its pause, its first 503 doubles the wait (1 s, then 2 s).
        #expect(machine.pausedApps(now: at(1.31)).isEmpty)
        let again = Self.written(answer(sick[0], Self.unavailable, at: 1.5))
        #expect(
            again.results.first?.attempted == false && machine.pausedApps(now: at(3.49)) == [7] && machine.pausedApps(now: at(3.51)).isEmpty
        )
        // Answers to sends after its pause that went through, until server errors are fewer
        // than half of its last ones: back, said once.
        var lines: [String] = []
        for delivery in sick[0..<40] { lines += Self.logged(answer(delivery, sent, at: 4, sent: 3.6)) }
        #expect(lines == ["notice FCM answers the app's sends again; its sending resumes"], "\(lines)")
        #expect(Self.written(answer(sick[1], Self.unavailable, at: 4.1)).results.first?.attempted == true)
    }

    /// In an app's brown-out its deliveries wait unclaimed: one claimed before its pause is held
    /// back (pending, `NOT_SENT`, no attempt), and when a pause ends one delivery goes as its probe
    /// while the app is left out of claims and the rest of what was claimed is held back. A
    /// probe failed doubles the pause; one taken lets the app's deliveries out, whose answers end
    /// the brown-out (a server error among them doubles the pause again). A project FCM still
    /// fails gets a request a pause, not its backlog.
    @Test func anAppsPauseEndsWithOneProbeNotItsBacklog() throws {
        var machine = machine(concurrency: 32)
        let sick = (1...16).map { Self.delivery($0, job: 1) }
        let well = (41...56).map { Self.delivery($0, job: 2) }
        let jobs = [Self.job(1), Self.otherAppsJob(2)]
        #expect(Self.sent(try claim(&machine, sick + well, jobs: jobs)).count == 32)
        _ = machine.answered(answer(sick[0], Self.unavailable), now: at(0.05))
        for delivery in well { _ = machine.answered(otherAppsAnswer(delivery, Self.sent), now: at(0.1)) }
        for delivery in sick[1...] { _ = machine.answered(answer(delivery, Self.unavailable), now: at(0.2)) }
        #expect(machine.pausedApps(now: at(0.2)) == [7] && machine.reachability.isReachable)
        func heldBack(_ actions: [DispatchStateMachine.Action]) -> [Int64] {
            Self.written(actions).results.filter { $0.errorCode == .notSent && !$0.attempted && $0.status == .pending }
                .map(\.deviceID)
        }
        // Claimed by a claim already on its way when the pause began: held back, not sent.
        let during = try claimAfterHint(&machine, Array(sick[0..<4]) + [Self.delivery(57, job: 2)], at: 0.3)
        #expect(Self.sent(during.actions) == [57] && heldBack(during.actions) == [1, 2, 3, 4])
        // The pause (1 s) over: the app's claimed deliveries, one probe, the rest held back; the
        // app left out of claims while it is out.
        let first = try claimAfterHint(&machine, sick, at: 1.3)
        #expect(first.leftOut.isEmpty && Self.sent(first.actions) == [1] && heldBack(first.actions) == Array(2...16))
        #expect(try claimAfterHint(&machine, [], at: 1.31).leftOut == [7])
        // FCM fails it: the pause doubles (2 s from its answer).
        let failed = machine.answered(answer(sick[0], Self.unavailable, sent: 1.3), now: at(1.35))
        #expect(heldBack(failed).isEmpty && Self.written(failed).results.first?.attempted == false)
        #expect(machine.pausedApps(now: at(3.3)) == [7] && machine.pausedApps(now: at(3.4)).isEmpty)
        // The next pause's probe FCM takes (its answers still mostly server errors): the app's
        // deliveries go out, all of them, and their answers end its brown-out.
        let second = try claimAfterHint(&machine, sick, at: 3.4)
        #expect(second.leftOut.isEmpty && Self.sent(second.actions) == [1] && heldBack(second.actions).count == 15)
        #expect(Self.logged(machine.answered(answer(sick[0], Self.sent, sent: 3.4), now: at(3.45))).isEmpty)
        #expect(machine.pausedApps(now: at(3.45)).isEmpty)
        let backlog = Array(sick[1...]) + (17...20).map { Self.delivery($0, job: 1) }
        let rest = try claimAfterHint(&machine, backlog, at: 3.5)
        #expect(rest.leftOut.isEmpty && Self.sent(rest.actions) == Array(2...20) && heldBack(rest.actions).isEmpty)
        // One of them failed: the breaker kept its failures, the pause doubles again (4 s).
        _ = machine.answered(answer(backlog[0], Self.unavailable, sent: 3.5), now: at(3.55))
        #expect(machine.pausedApps(now: at(7.5)) == [7] && machine.pausedApps(now: at(7.6)).isEmpty)
        var lines: [String] = []
        for delivery in backlog[1...] { lines += Self.logged(machine.answered(answer(delivery, Self.sent, sent: 3.5), now: at(3.6))) }
        #expect(lines == ["notice FCM answers the app's sends again; its sending resumes"], "\(lines)")
        #expect(machine.pausedApps(now: at(3.6)).isEmpty)
    }

    /// Past its bound, counted from the brown-out's start (here FCM's, which another app's taken
    /// probe made the app's own), an app's deliveries all go, to fail with their jobs at once if
    /// FCM still fails the app: its breaker, opened later, would let them out a probe at a time.
    @Test func pastItsBoundAnAppsDeliveriesGoAndFailWithTheirJobs() throws {
        var machine = machine(concurrency: 16, longestOutage: .seconds(10))
        let sick = (1...16).map { Self.delivery($0, job: 1) }
        #expect(Self.sent(try claim(&machine, sick, jobs: [Self.job(1), Self.otherAppsJob(2)])) == Array(1...16))
        for delivery in sick { _ = machine.answered(answer(delivery, Self.unavailable), now: at(0)) }
        #expect(!machine.reachability.isReachable)
        // 9 s on, FCM takes another app's probe: the app's own brown-out counts from 0 s.
        #expect(Self.sent(try claimAfterHint(&machine, [Self.delivery(41, job: 2)], at: 9).actions) == [41])
        _ = machine.answered(otherAppsAnswer(Self.delivery(41, job: 2), Self.sent, probe: true, sent: 9), now: at(9.05))
        #expect(machine.pausedApps(now: at(9.05)) == [7])
        // At 11 s its deliveries all go, and FCM's 503 fails the job.
        #expect(machine.pausedApps(now: at(11)).isEmpty)
        #expect(Self.sent(try claimAfterHint(&machine, Array(sick[0..<4]), at: 11).actions) == [1, 2, 3, 4])
        let late = Self.written(machine.answered(answer(sick[0], Self.unavailable, sent: 11), now: at(11.1)))
        #expect(late.results.first.map { "\($0.status) \($0.errorCode?.rawValue ?? "-")" } == "failed UNAVAILABLE")
        #expect(late.jobFailures.first?.reason.hasPrefix("app wowa: FCM answered the app's sends with server errors for over 10 s") == true)
    }

    /// An app's brown-out is bounded as FCM's: past the longest outage its jobs fail. Without
    /// another app's send taken by FCM in the last ten seconds, nothing says FCM takes anyone's:
    /// the same 503s are FCM's brown-out, behind the breaker for every app.
    @Test func anAppsBrownOutIsBoundedAndWithoutAnotherAppsAcceptedSendsItIsFCMs() throws {
        func brownOut(otherAnswersAt second: Double) throws -> (DispatchStateMachine, [DeliveryQueue.Claimed]) {
            var machine = machine(concurrency: 64, longestOutage: .seconds(10))
            let sick = (1...40).map { Self.delivery($0, job: 1) }
            let well = (41...56).map { Self.delivery($0, job: 2) }
            #expect(Self.sent(try claim(&machine, sick + well, jobs: [Self.job(1), Self.otherAppsJob(2)])).count == 56)
            _ = machine.answered(answer(sick[0], Self.unavailable), now: at(second - 0.1))
            for delivery in well { _ = machine.answered(otherAppsAnswer(delivery, Self.sent), now: at(second)) }
            for delivery in sick[1..<16] { _ = machine.answered(answer(delivery, Self.unavailable), now: at(11)) }
            return (machine, sick)
        }
        var (paused, sick) = try brownOut(otherAnswersAt: 10.9)
        #expect(paused.reachability.isReachable && paused.pausedApps(now: at(11)) == [7])
        let late = Self.written(paused.answered(answer(sick[16], Self.unavailable), now: at(21.5)))
        #expect(late.results.first.map { "\($0.status) \($0.errorCode?.rawValue ?? "-")" } == "failed UNAVAILABLE")
        #expect(late.jobFailures.first?.reason.hasPrefix("app wowa: FCM answered the app's sends with server errors for over 10 s") == true)
        var (fcmWide, _) = try brownOut(otherAnswersAt: 0.5)
        #expect(!fcmWide.reachability.isReachable && fcmWide.pausedApps(now: at(11)).isEmpty)
    }

    /// FCM failing everyone just after one app's brown-out began (another app vouching then):
    /// that other app's first 503s spend an attempt, as one device's would, but its fourth in a
    /// row is FCM's brown-out, before its few answers could spend their attempts. The sick app's
    /// answers neither end FCM's brown-out nor hold it, nor do answers to sends from before it:
    /// the other app's probe does.
    @Test func serverErrorsInARowBesideAnAppsBrownOutAreFCMs() throws {
        var machine = machine(concurrency: 64)
        let sick = (1...40).map { Self.delivery($0, job: 1) }
        let well = (41...60).map { Self.delivery($0, job: 2) }
        #expect(Self.sent(try claim(&machine, sick + well, jobs: [Self.job(1), Self.otherAppsJob(2)])).count == 60)
        _ = machine.answered(answer(sick[0], Self.unavailable), now: at(0.05))
        for delivery in well[0..<16] { _ = machine.answered(otherAppsAnswer(delivery, Self.sent), now: at(0.1)) }
        for delivery in sick[1..<16] { _ = machine.answered(answer(delivery, Self.unavailable), now: at(0.2)) }
        #expect(machine.pausedApps(now: at(0.2)) == [7] && machine.reachability.isReachable)
        for delivery in well[16..<19] {
            let spent = Self.written(machine.answered(otherAppsAnswer(delivery, Self.unavailable), now: at(0.3)))
            #expect(spent.results.first?.attempted == true)
        }
        let fourth = machine.answered(otherAppsAnswer(well[19], Self.unavailable), now: at(0.4))
        #expect(Self.written(fourth).results.first.map { "\($0.status) \($0.attempted)" } == "pending false")
        #expect(Self.logged(fourth).first?.hasPrefix("warning FCM answers most sends with server errors") == true)
        #expect(!machine.reachability.isReachable)
        // The sick app's answer that went through ends nothing of FCM's.
        #expect(Self.logged(machine.answered(answer(sick[16], Self.sent), now: at(0.5))).isEmpty && !machine.reachability.isReachable)
        // Nor does the other app's answer that went through to a send from before FCM's brown-out.
        #expect(Self.logged(machine.answered(otherAppsAnswer(well[0], Self.sent), now: at(0.6))).isEmpty)
        // The other app's probe that went through: FCM is back.
        let back = machine.answered(otherAppsAnswer(Self.delivery(61, job: 2), Self.sent, probe: true, sent: 1.4), now: at(1.45))
        #expect(Self.logged(back) == ["notice FCM answers again; sending resumes"])
    }

    /// Apps idle for more than ten seconds vouch for nothing, however many of their sends FCM took
    /// before: one app's server errors are then FCM's as soon as they are most of its answers,
    /// as they were with one app, and spend no more attempts.
    @Test func idleAppsSuccessesDoNotHideFCMFailing() throws {
        var machine = machine(concurrency: 64)
        let sick = (1...40).map { Self.delivery($0, job: 1) }
        let idle = (41...72).map { Self.delivery($0, job: 2) }
        #expect(Self.sent(try claim(&machine, sick + idle, jobs: [Self.job(1), Self.otherAppsJob(2)])).count == 64)
        for delivery in idle { _ = machine.answered(otherAppsAnswer(delivery, Self.sent), now: at(0)) }
        for delivery in sick[0..<15] {
            #expect(Self.written(machine.answered(answer(delivery, Self.unavailable), now: at(20))).results.first?.attempted == true)
        }
        let sixteenth = machine.answered(answer(sick[15], Self.unavailable), now: at(20))
        #expect(Self.written(sixteenth).results.first?.attempted == false && !machine.reachability.isReachable)
        #expect(Self.logged(sixteenth).first?.hasPrefix("warning FCM answers most sends with server errors") == true)
        #expect(machine.pausedApps(now: at(20)).isEmpty)
    }

    /// A brown-out that ends and starts again within a minute is the same one: its bound counts
    /// from its first start, so that one app's 503s, ended each time by another app's answers,
    /// do not hold its deliveries for good. One that starts again later is a brown-out of its own.
    @Test func aBrownOutStartedAgainSoonAfterItEndedKeepsItsFirstStart() throws {
        func startedAgain(at second: Double) throws -> Outbox.Batch {
            var machine = machine(concurrency: 64, longestOutage: .seconds(10))
            let sick = (1...20).map { Self.delivery($0, job: 1) }
            let well = (41...60).map { Self.delivery($0, job: 2) }
            #expect(Self.sent(try claim(&machine, sick + well, jobs: [Self.job(1), Self.otherAppsJob(2)])).count == 40)
            for delivery in sick[0..<16] { _ = machine.answered(answer(delivery, Self.unavailable), now: at(0)) }
            #expect(!machine.reachability.isReachable)
            var lines: [String] = []
            // Sends of the other app after the breaker let them out, answered well.
            for delivery in well[0..<17] {
                lines += Self.logged(machine.answered(otherAppsAnswer(delivery, Self.sent, sent: 0.9), now: at(1)))
            }
            #expect(lines == ["notice FCM answers again; sending resumes"])
            // Over ten seconds after the other app's last answer: nobody vouches, the sick app's
            // 503 is FCM's again.
            return Self.written(machine.answered(answer(sick[16], Self.unavailable), now: at(second)))
        }
        let soon = try startedAgain(at: 12)
        #expect(soon.results.first.map { "\($0.status) \($0.attempted)" } == "failed false")
        #expect(soon.jobFailures.first?.reason.hasPrefix("app wowa: FCM answered server errors for over 10 s") == true)
        let later = try startedAgain(at: 1 + 61)
        #expect(later.results.first.map { "\($0.status) \($0.attempted)" } == "pending false" && later.jobFailures.isEmpty)
    }

    /// At the tipping point (one app failing, another answered well, their answers interleaved,
    /// server errors about half of the worker's), FCM's brown-out starts once: answers to sends
    /// that left before it began say what FCM was, and neither end it nor start it over (with
    /// them, the warning and "answers again" alternated within a second). Once the other app has
    /// answers enough to vouch for FCM, the failing app gets a brown-out of its own, which its
    /// answers to sends from before do not end either, and FCM's ends: it was that app's.
    @Test func answersToSendsFromBeforeABrownOutNeitherEndItNorStartItOver() throws {
        var machine = machine(concurrency: 128)
        let sick = (1...65).map { Self.delivery($0, job: 1) }
        let well = (101...132).map { Self.delivery($0, job: 2) }
        let jobs = [Self.job(1), Self.otherAppsJob(2)]
        #expect(Self.sent(try claim(&machine, sick + well, jobs: jobs)).count == 97)
        var lines: [String] = []
        for (pair, (sick, well)) in zip(sick[0..<32], well).enumerated() {
            let second = 0.1 + Double(pair) / 100
            lines += Self.logged(machine.answered(otherAppsAnswer(well, Self.sent), now: at(second)))
            let held = machine.answered(answer(sick, Self.unavailable), now: at(second))
            lines += Self.logged(held)
            // Its first seven spend attempts, as one device's would; the eighth, half of sixteen, is FCM's.
            #expect(Self.written(held).results.first?.attempted == (pair < 7), "\(pair)")
        }
        #expect(
            lines == [
                "warning FCM answers most sends with server errors; sending waits for it (no attempts spent), probing from 1 s to a minute",
                "warning FCM answers most of the app's sends with server errors and other apps' well; the app's sending waits (no attempts spent), the others go on",
                "notice FCM answers again; sending resumes",
            ], "\(lines)")
        #expect(machine.reachability.isReachable && machine.pausedApps(now: at(0.45)) == [7])
        // The failing app's other sends from before, answered well: server errors are no longer
        // most of its answers, yet its brown-out goes on.
        for delivery in sick[32...] { lines += Self.logged(machine.answered(answer(delivery, Self.sent), now: at(0.45))) }
        #expect(lines.count == 3, "\(lines)")
        #expect(machine.reachability.isReachable && machine.pausedApps(now: at(0.5)) == [7])
    }

    /// During FCM's brown-out, an app FCM has not failed in it does not wait for the breaker's
    /// next probe (up to a minute late in a long one): with nothing in flight, its first
    /// delivery, ready or found by a claim among the apps not failed, goes at once as a probe.
    /// Taken, it ends FCM's brown-out and puts the failing app in one of its own; failed, that
    /// app waits for the breaker's probes as the others do, and the breaker's wait doubles.
    @Test func anotherAppsSendDuringFCMsBrownOutGoesAtOnceAsAProbe() throws {
        let jobs = [Self.job(1), Self.otherAppsJob(2)]
        func brownOut() throws -> DispatchStateMachine {
            var machine = machine(concurrency: 16)
            let sick = (1...16).map { Self.delivery($0, job: 1) }
            #expect(Self.sent(try claim(&machine, sick, jobs: jobs)) == Array(1...16))
            for delivery in sick { _ = machine.answered(answer(delivery, Self.unavailable), now: at(0)) }
            #expect(!machine.reachability.isReachable)
            // The last claim found all there was: nothing sent, and no claim until a hint.
            let idle = machine.poll(now: at(0.2), stopping: false).actions
            #expect(Self.sent(idle).isEmpty && Self.claimRequest(idle) == nil)
            return machine
        }
        /// After a NOTIFY at `second`: the claim among the apps not failed finds the other app's
        /// delivery, and what the poll sends.
        func notified(_ machine: inout DispatchStateMachine, at second: Double) throws -> [DispatchStateMachine.Action] {
            let round = try claimRound(&machine, [Self.delivery(41, job: 2)], jobs: [], running: [2], at: second, hinted: true)
            #expect(round.request.limit == 1 && round.request.pausedApps == [7] && !round.request.passesOverProbedApps)
            return round.actions
        }
        // FCM takes it: its brown-out ends, the sick app waits on its own breaker.
        var taken = try brownOut()
        let probe = try notified(&taken, at: 0.5)
        #expect(probe.contains { if case .send(let claims, probe: true, _) = $0 { claims.map(\.claimed.deviceID) == [41] } else { false } })
        #expect(
            Self.logged(taken.answered(otherAppsAnswer(Self.delivery(41, job: 2), Self.sent, probe: true, sent: 0.5), now: at(0.55))) == [
                "notice FCM answers again; sending resumes"
            ])
        #expect(taken.reachability.isReachable && taken.pausedApps(now: at(0.55)) == [7])
        // FCM fails it too: both apps wait for the breaker, whose next probe is now 2 s away.
        var failed = try brownOut()
        _ = try notified(&failed, at: 0.5)
        _ = failed.answered(otherAppsAnswer(Self.delivery(41, job: 2), Self.unavailable, probe: true, sent: 0.5), now: at(0.55))
        failed.hinted()
        let passed = try #require(Self.claimRequest(failed.poll(now: at(0.6), stopping: false).actions))
        #expect(passed.pausedApps == [7, 8] && !passed.passesOverProbedApps)
        _ = failed.claimed(.init(claimed: [], loadedJobs: [], runningJobs: [], cursor: passed.cursor), for: passed, now: at(0.6))
        #expect(failed.reachability.admission(now: at(2.5)) == .closed && failed.reachability.admission(now: at(2.56)) == .probe)
        // FCM cannot be reached either: the app sent its one early probe, and waits for the breaker.
        var unreachable = try brownOut()
        _ = try notified(&unreachable, at: 0.5)
        let refused = unreachable.answered(
            otherAppsAnswer(Self.delivery(41, job: 2), .notSent(reason: "connect: refused", unreachable: true), probe: true, sent: 0.5),
            now: at(0.55))
        #expect(Self.written(refused).results.first.map { "\($0.status) \($0.attempted)" } == "pending false")
        unreachable.hinted()
        let after = try #require(Self.claimRequest(unreachable.poll(now: at(0.6), stopping: false).actions))
        #expect(after.pausedApps == [7, 8])
        let again = unreachable.claimed(
            .init(claimed: [Self.delivery(42, job: 2)], loadedJobs: [], runningJobs: [2], cursor: after.cursor), for: after, now: at(0.6))
        #expect(Self.sent(again + unreachable.poll(now: at(0.7), stopping: false).actions).isEmpty)
    }

    /// A probe FCM takes during its brown-out puts the apps it failed in brown-outs of their own,
    /// but not one unanswered for five minutes: what its answers said is forgotten, and a
    /// brown-out begun now, counted from FCM's, would fail its next job at once.
    @Test func aTakenProbeLeavesAnAppUnansweredForFiveMinutesOutOfBrownOuts() throws {
        var machine = machine(concurrency: 16)
        let third = DeliveryQueue.Job(
            id: 3, appID: 9, appCode: "third", message: PreparedMessage(messageJSON: "{}", validateOnly: false), account: Self.account,
            projectProven: true)
        let sick = (1...16).map { Self.delivery($0, job: 1) }
        _ = try claim(&machine, sick, jobs: [Self.job(1), Self.otherAppsJob(2), third])
        for delivery in sick { _ = machine.answered(answer(delivery, Self.unavailable), now: at(0)) }
        // The other app's probes fail every 100 s: FCM's brown-out goes on.
        for second in [100.0, 200, 300, 400] {
            let probe = Self.delivery(40 + Int64(second / 100), job: 2)
            _ = machine.answered(otherAppsAnswer(probe, Self.unavailable, probe: true, sent: second), now: at(second + 0.05))
        }
        let taken = machine.answered(
            .init(claimed: Self.delivery(50, job: 3), job: third, result: .success(Self.sent), probe: true, sentAt: at(400.1)),
            now: at(400.15))
        #expect(Self.logged(taken) == ["notice FCM answers again; sending resumes"])
        #expect(machine.reachability.isReachable && machine.pausedApps(now: at(400.2)) == [8])
    }

    /// FCM's brown-out begun by 503s to two apps, nobody vouching (so neither sends early, as an
    /// app FCM has not failed would): a probe FCM answers with a server error passes its app
    /// over for the next probes, which go to another app's ready delivery,
    /// or to one a claim finds among the other apps. Only when no other app has anything does
    /// the probed app get the next probe again. (Otherwise its retries, due first, would take
    /// every probe and the other apps' sends wait for the whole brown-out.) FCM taking the other
    /// app's probe puts the probed app in a brown-out of its own: paused, not let out whole
    /// each time the breaker closes.
    @Test func probesOfFCMsBrownOutGoToAnotherAppThanTheOneTheyFoundFailing() throws {
        let jobs = [Self.job(1), Self.otherAppsJob(2)]
        /// What a poll at `second` sent as a probe, and the claim it asked for.
        func poll(_ machine: inout DispatchStateMachine, at second: Double) -> (probed: [Int64], claim: DispatchStateMachine.ClaimRequest?)
        {
            let actions = machine.poll(now: at(second), stopping: false).actions
            let probed = actions.flatMap { action -> [Int64] in
                guard case .send(let claims, probe: true, _) = action else { return [] }
                return claims.map(\.claimed.deviceID)
            }
            return (probed, Self.claimRequest(actions))
        }
        /// Answers `request` with `claimed` (the ready ones' jobs running) and polls again.
        func answer(
            _ machine: inout DispatchStateMachine, _ request: DispatchStateMachine.ClaimRequest?, with claimed: [DeliveryQueue.Claimed],
            at second: Double
        ) throws -> (probed: [Int64], claim: DispatchStateMachine.ClaimRequest?) {
            let request = try #require(request)
            let result = DispatchStateMachine.ClaimResult(
                claimed: claimed, loadedJobs: jobs.filter { !request.freshJobs.contains($0.id) }, runningJobs: Set(request.recheckJobs),
                cursor: request.cursor)
            _ = machine.claimed(result, for: request, now: at(second))
            return poll(&machine, at: second)
        }
        func probeAnswer(_ delivery: DeliveryQueue.Claimed, _ answer: FCMClient.Answer, sent: Double) -> DispatchStateMachine.Attempt {
            .init(claimed: delivery, job: jobs[Int(delivery.jobID) - 1], result: .success(answer), probe: true, sentAt: at(sent))
        }
        /// 16 of the sick app's deliveries and one of the other app's answered 503 (`ready`
        /// waiting), then a first probe, the sick app's, answered 503 at 1 s: the next probe is
        /// due at 3 s.
        func probedOnce(ready: [DeliveryQueue.Claimed]) throws -> DispatchStateMachine {
            var machine = machine(concurrency: 17, longestOutage: .seconds(10))
            let sick = (1...16).map { Self.delivery($0, job: 1) }
            let other = Self.delivery(61, job: 2)
            #expect(Self.sent(try claim(&machine, sick + [other], jobs: jobs)).sorted() == Array(1...16) + [61])
            if !ready.isEmpty {
                // Claimed after a NOTIFY, with every slot taken: they wait.
                machine.hinted()
                for case .claim(let request) in machine.poll(now: at(0), stopping: false).actions {
                    let found = request.priority == nil ? ready : []
                    _ = machine.claimed(
                        .init(claimed: found, loadedJobs: [], runningJobs: Set(request.recheckJobs), cursor: request.cursor), for: request,
                        now: at(0))
                }
                #expect(Self.sent(machine.poll(now: at(0), stopping: false).actions).isEmpty)
            }
            for delivery in sick { _ = machine.answered(self.answer(delivery, Self.unavailable), now: at(0)) }
            _ = machine.answered(otherAppsAnswer(other, Self.unavailable), now: at(0))
            let idle = poll(&machine, at: 0)
            #expect(!machine.reachability.isReachable && idle.probed.isEmpty && idle.claim == nil)
            machine.hinted()
            // A claim for the probe when nothing is ready; a check of the ready ones' jobs otherwise.
            let check = poll(&machine, at: 1)
            let probe = ready.first ?? Self.delivery(17, job: 1, attempts: 1)
            #expect(check.claim?.pausedApps == [] && check.claim?.passesOverProbedApps == false)
            #expect(try answer(&machine, check.claim, with: ready.isEmpty ? [probe] : [], at: 1).probed == [probe.deviceID])
            _ = machine.answered(probeAnswer(probe, Self.unavailable, sent: 1), now: at(1.02))
            #expect(machine.reachability.admission(now: at(2.9)) == .closed)
            return machine
        }
        // Ready deliveries of both apps: the next probe is the other app's, behind the sick one's.
        var ready = try probedOnce(ready: [Self.delivery(101, job: 1), Self.delivery(102, job: 1), Self.delivery(41, job: 2)])
        #expect(try answer(&ready, poll(&ready, at: 3.1).claim, with: [], at: 3.1).probed == [41])
        let taken = ready.answered(probeAnswer(Self.delivery(41, job: 2), Self.sent, sent: 3.1), now: at(3.12))
        #expect(Self.logged(taken) == ["notice FCM answers again; sending resumes"])
        #expect(ready.reachability.isReachable && ready.pausedApps(now: at(4.1)) == [7] && ready.pausedApps(now: at(4.13)).isEmpty)
        // Told when FCM fails the app again; its brown-out counts from FCM's: past the bound,
        // its 503 fails the job.
        let again = ready.answered(self.answer(Self.delivery(101, job: 1), Self.unavailable), now: at(10.5))
        #expect(
            Self.logged(again) == [
                "warning FCM answers most of the app's sends with server errors and other apps' well; the app's sending waits (no attempts spent), the others go on"
            ])
        #expect(
            Self.written(again).jobFailures.first?.reason.hasPrefix(
                "app wowa: FCM answered the app's sends with server errors for over 10 s") == true)
        // Nothing of another app ready: the probe's claim passes the sick app over and finds the other's.
        var claimed = try probedOnce(ready: [])
        let passing = try #require(poll(&claimed, at: 3.1).claim)
        #expect(passing.limit == 1 && passing.pausedApps == [7] && passing.passesOverProbedApps)
        #expect(try answer(&claimed, passing, with: [Self.delivery(41, job: 2)], at: 3.1).probed == [41])
        // FCM was failing everyone and takes both apps' sends again: the probed app's brown-out
        // ends as its answers go through, without a word of its own.
        var lines = Self.logged(claimed.answered(probeAnswer(Self.delivery(41, job: 2), Self.sent, sent: 3.1), now: at(3.12)))
        for device in Int64(201)...220 {
            lines += Self.logged(claimed.answered(self.answer(Self.delivery(device, job: 1), Self.sent, sent: 4.13), now: at(4.2)))
        }
        #expect(lines == ["notice FCM answers again; sending resumes"], "\(lines)")
        let spent = Self.written(claimed.answered(self.answer(Self.delivery(221, job: 1), Self.unavailable), now: at(4.3)))
        #expect(spent.results.first?.attempted == true && claimed.pausedApps(now: at(4.3)).isEmpty)
        // No other app has anything: the sick app's delivery is the probe after all.
        var alone = try probedOnce(ready: [])
        // The claim found no due delivery of the others, and looks for due ones only now and then.
        let passed = try #require(poll(&alone, at: 3.1).claim)
        var paused = passed.cursor
        paused.nextDueClaim = at(3.2)
        _ = alone.claimed(.init(claimed: [], loadedJobs: [], runningJobs: [], cursor: paused), for: passed, now: at(3.1))
        let none = poll(&alone, at: 3.1)
        #expect(none.probed.isEmpty && none.claim?.pausedApps == [] && none.claim?.passesOverProbedApps == false)
        #expect(none.claim.map { $0.cursor.nextDueClaim <= at(3.1) } == true, "the probed app's due deliveries are looked for at once")
        #expect(try answer(&alone, none.claim, with: [Self.delivery(18, job: 1, attempts: 1)], at: 3.1).probed == [18])
    }

    static let unavailable = FCMClient.Answer.answered(
        .transient(errorCode: .unavailable, message: "The service is currently unavailable.", retryAfter: nil, quota: false),
        elapsed: .milliseconds(20))

    static let sent = FCMClient.Answer.answered(.sent(messageID: "m"), elapsed: .milliseconds(20))

    /// An answer to a delivery of job 2, of another app, its send left at `sent` seconds.
    func otherAppsAnswer(
        _ delivery: DeliveryQueue.Claimed, _ answer: FCMClient.Answer, probe: Bool = false, sent: Double = 0
    ) -> DispatchStateMachine.Attempt {
        .init(claimed: delivery, job: Self.otherAppsJob(2), result: .success(answer), probe: probe, sentAt: at(sent))
    }

    /// A job of another app (8, "other").
    static func otherAppsJob(_ id: Int64) -> DeliveryQueue.Job {
        .init(
            id: id, appID: 8, appCode: "other", message: PreparedMessage(messageJSON: "{}", validateOnly: false), account: account,
            projectProven: true)
    }

    @Test func quotaAndTokenEndpointWaitsPauseTheApp() throws {
        var machine = machine()
        let claimed = [Self.delivery(1), Self.delivery(2), Self.delivery(3)]
        _ = try claim(&machine, claimed)
        func quotaAnswer(_ delivery: DeliveryQueue.Claimed, at second: Double) -> [DispatchStateMachine.Action] {
            machine.answered(
                answer(
                    delivery,
                    .answered(
                        .transient(errorCode: .quotaExceeded, message: "slow down", retryAfter: .seconds(90), quota: true),
                        elapsed: .milliseconds(5))), now: at(second))
        }
        func warnings(_ actions: [DispatchStateMachine.Action]) -> Int {
            actions.count { if case .log(.warning, _, _) = $0 { true } else { false } }
        }
        let quota = quotaAnswer(claimed[0], at: 0)
        #expect(Self.written(quota).results.first?.attempted == true && Self.counted(quota) == ["retry"])
        // The app's sends answered together pause it once, and say so once.
        let again = quotaAnswer(claimed[2], at: 0.5)
        #expect(warnings(quota) == 1 && warnings(again) == 0)
        #expect(machine.pausedApps(now: at(90)) == [7] && machine.pausedApps(now: at(91)).isEmpty)
        let token = machine.answered(
            .init(
                claimed: claimed[1], job: Self.job(), result: .failure(.transient("HTTP 503", retryAfter: .seconds(4))), probe: false,
                sentAt: at(0)),
            now: at(100))
        #expect(
            Self.written(token).results.first.map { "\($0.status) \($0.errorCode?.rawValue ?? "-") \($0.attempted)" }
                == "pending OAUTH_UNAVAILABLE false")
        #expect(machine.pausedApps(now: at(103)) == [7] && machine.pausedApps(now: at(105)).isEmpty)
        #expect(Self.logged(token) == ["warning Google's token endpoint unavailable; the app's sends wait for it"])
        #expect(Self.counted(token) == ["oauth_unavailable"])
    }

    @Test func aJobForgottenWhileItsDeliveriesWaitedIsReadAgainNotCheckedForever() throws {
        var machine = machine(concurrency: 1)
        let claimed = [Self.delivery(1), Self.delivery(2)]
        #expect(Self.sent(try claim(&machine, claimed)) == [1])
        // FCM away for over a minute: the job is forgotten meanwhile (any claim's result forgets it).
        _ = machine.answered(answer(claimed[0], .answered(.sent(messageID: "m"), elapsed: nil)), now: at(70))
        var actions = machine.poll(now: at(70), stopping: false).actions
        var check = try #require(Self.claimRequest(actions))
        actions = machine.claimed(.init(claimed: [], loadedJobs: [], runningJobs: [1], cursor: check.cursor), for: check, now: at(70))
        actions += machine.poll(now: at(70), stopping: false).actions
        // Its details unknown, the ready delivery cannot go; the next check waits a little and
        // asks for them (the job is not among the fresh ones), instead of spinning.
        #expect(Self.sent(actions).isEmpty && Self.claimRequest(actions) == nil)
        check = try #require(Self.claimRequest(machine.poll(now: at(70.01), stopping: false).actions))
        #expect(check.recheckJobs == [1] && !check.freshJobs.contains(1))
        actions = machine.claimed(
            .init(claimed: [], loadedJobs: [Self.job()], runningJobs: [1], cursor: check.cursor), for: check, now: at(70.01))
        actions += machine.poll(now: at(70.01), stopping: false).actions
        #expect(Self.sent(actions) == [2])
    }

    @Test func jobsAreReadAgainWhenStaleAndFailedClaimsBackOff() throws {
        var machine = machine()
        _ = try claim(&machine, [Self.delivery(1)])
        machine.hinted()
        _ = machine.answered(answer(Self.delivery(1), .answered(.sent(messageID: "m"), elapsed: nil)), now: at(1))
        let fresh = try #require(Self.claimRequest(machine.poll(now: at(1), stopping: false).actions))
        #expect(fresh.freshJobs == [1] && fresh.backoff == .milliseconds(500))
        machine.claimFailed(fresh)
        let again = try #require(Self.claimRequest(machine.poll(now: at(6), stopping: false).actions))
        // Read over five seconds ago: its credentials are read again; the backoff doubles.
        #expect(again.freshJobs.isEmpty && again.backoff == .seconds(1))
    }

    @Test func aHighPriorityJobIsClaimedPastAFullHoldingAndGoesOutWithTheNextFreeSlot() throws {
        var machine = machine(concurrency: 4)
        let bulk = DeliveryQueue.Job(
            id: 1, appID: 7, appCode: "wowa", message: PreparedMessage(messageJSON: "{}", validateOnly: false),
            account: Self.account, projectProven: true, priority: .bulk)
        let high = DeliveryQueue.Job(
            id: 2, appID: 7, appCode: "wowa", message: PreparedMessage(messageJSON: "{}", validateOnly: false),
            account: Self.account, projectProven: true, priority: .high)
        let campaign = (1...8).map { Self.delivery($0) }
        #expect(Self.sent(try claim(&machine, campaign, jobs: [bulk])) == [1, 2, 3, 4])
        // Twice the capacity held: no claim, until a NOTIFY says a job came.
        #expect(Self.claimRequest(machine.poll(now: at(0), stopping: false).actions) == nil)
        machine.hinted()
        let urgent = try #require(Self.claimRequest(machine.poll(now: at(0), stopping: false).actions))
        #expect(urgent.priority == .high && urgent.limit == DeliveryQueue.chunkSize)
        let single = Self.delivery(100, job: 2)
        var actions = machine.claimed(
            .init(claimed: [single], loadedJobs: [high], runningJobs: [], cursor: urgent.cursor), for: urgent, now: at(0))
        // Found less than it asked for, yet the campaign's claims are not held back by that.
        #expect(Self.claimRequest(machine.poll(now: at(0), stopping: false).actions) == nil)
        // The next answer's slot goes to the single, ahead of the four campaign deliveries ready.
        actions = machine.answered(answer(campaign[0], .answered(.sent(messageID: "m"), elapsed: nil)), now: at(0))
        #expect(Self.written(actions).urgent == false)
        actions = machine.poll(now: at(0), stopping: false).actions
        #expect(Self.sent(actions) == [100])
        // Its result is written at once, not gathered with the campaign's.
        let answered = DispatchStateMachine.Attempt(
            claimed: single, job: high, result: .success(.answered(.sent(messageID: "m"), elapsed: nil)),
            probe: false, sentAt: at(0))
        let writes = machine.answered(answered, now: at(0)).compactMap { if case .write(let batch) = $0 { batch } else { nil } }
        #expect(writes.count == 1 && writes[0].urgent && writes[0].results.map(\.deviceID) == [100])
        // While the usual claim is on its way, a hint brings a high-priority claim beside it.
        for index in 1...3 { _ = machine.answered(answer(campaign[index], .answered(.sent(messageID: "m"), elapsed: nil)), now: at(0)) }
        let usual = try #require(Self.claimRequest(machine.poll(now: at(0), stopping: false).actions))
        #expect(usual.priority == nil && usual.limit > 0)
        machine.hinted()
        let beside = try #require(Self.claimRequest(machine.poll(now: at(0), stopping: false).actions))
        #expect(beside.priority == .high && beside.recheckJobs.isEmpty)
        _ = machine.claimed(.init(claimed: [], loadedJobs: [], runningJobs: [], cursor: beside.cursor), for: beside, now: at(0))
        // The usual one is still awaited: no second one.
        #expect(Self.claimRequest(machine.poll(now: at(0), stopping: false).actions) == nil)
    }

    @Test func readyDeliveriesPastTheirJobsExpiryAreSkippedNotSent() throws {
        var machine = machine(concurrency: 8)
        let expired = DeliveryQueue.Job(
            id: 1, appID: 7, appCode: "wowa", message: PreparedMessage(messageJSON: "{}", validateOnly: false),
            account: Self.account, projectProven: true, expiresAt: Date(timeIntervalSince1970: 1_800_000_000))
        let request = try #require(Self.claimRequest(machine.poll(now: at(0), stopping: false).actions))
        _ = machine.claimed(
            .init(
                claimed: [Self.delivery(1), Self.delivery(2, chunk: 5)], loadedJobs: [expired], runningJobs: [],
                cursor: request.cursor), for: request, now: at(0))
        let before = machine.poll(now: at(0), stopping: false, date: Date(timeIntervalSince1970: 1_799_999_999)).actions
        #expect(Self.sent(before) == [1, 2])
        // The same deliveries, ready when the expiry has come:
        machine = self.machine(concurrency: 8)
        let second = try #require(Self.claimRequest(machine.poll(now: at(0), stopping: false).actions))
        _ = machine.claimed(
            .init(
                claimed: [Self.delivery(1), Self.delivery(2, chunk: 5)], loadedJobs: [expired], runningJobs: [],
                cursor: second.cursor), for: second, now: at(0))
        let after = machine.poll(now: at(0), stopping: false, date: Date(timeIntervalSince1970: 1_800_000_000)).actions
        #expect(Self.sent(after).isEmpty)
        let written = Self.written(after)
        #expect(
            written.results.map { "\($0.deviceID) \($0.status) \($0.errorCode?.rawValue ?? "-") \($0.attempted)" } == [
                "1 skipped EXPIRED false", "2 skipped EXPIRED false",
            ])
        #expect(written.results.first?.errorMessage == "expired at 2027-01-15T08:00:00.000Z before it was sent")
        #expect(written.finishedChunks == [5])
    }
}
