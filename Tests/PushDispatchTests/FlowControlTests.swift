import FCMEmulator
import Foundation
import Testing

@testable import PushDispatch

/// The worker under FCM's real conditions: slow answers, an FCM that cannot be reached.
@Suite("Dispatch by slot, FCM outages")
struct FlowControlTests {
    @Test func aSlowAnswerHoldsBackNothingButItsOwnDelivery() async throws {
        try await WorkerFixture.with { fixture in
            let tokens = (1...200).map { "tok-slot-\($0)" }
            try await fixture.register(tokens)
            // One answer takes 15 s (within the 30 s send deadline); it shares its slice (and its
            // connection) with 63 others.
            fixture.emulator.script(token: "tok-slot-3", .slow(.seconds(15)))
            let job = try await fixture.campaign()
            let (early, status) = try await fixture.withWorker {
                let deadline = ContinuousClock.now + .seconds(12)
                var early = try await fixture.deliveries(job)
                while early.count < 199 && ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(100))
                    early = try await fixture.deliveries(job)
                }
                return (early, try await fixture.finished(job).status)
            }
            // Every other answer was recorded while the slow one was still on its way.
            #expect(early.count == 199 && early.values.allSatisfy { $0.status == "sent" }, "\(early.count) rows within 12 s")
            #expect(early["tok-slot-3"] == nil)
            #expect(status == "completed")
            let rows = try await fixture.deliveries(job)
            #expect(rows.count == 200 && rows.values.allSatisfy { $0.status == "sent" && $0.attempts == 1 })
        }
    }

    @Test func nothingIsLostWhileFCMCannotBeReached() async throws {
        try await WorkerFixture.with { fixture in
            let tokens = (1...300).map { "tok-outage-\($0)" }
            try await fixture.register(tokens)
            // Slow enough that the outage starts with the campaign in full flow.
            fixture.emulator.script(tokenPrefix: "tok-outage-", .slow(.milliseconds(300)))
            var configuration = fixture.configuration
            configuration.concurrency = 32
            let job = try await fixture.campaign()
            let status = try await fixture.withWorker(configuration) {
                try await Task.sleep(for: .milliseconds(700))
                fixture.emulator.beginOutage(for: .seconds(4))
                return try await fixture.finished(job, within: .seconds(60)).status
            }
            #expect(status == "completed")
            let rows = try await fixture.deliveries(job)
            #expect(rows.count == 300)
            #expect(
                rows.values.allSatisfy { $0.status == "sent" },
                "\(rows.values.filter { $0.status != "sent" }.map { "\($0.status)/\($0.errorCode ?? "-")/\($0.attempts)" })")
            // Only the sends written before the connections were cut could have been delivered
            // already: they alone spent a second attempt.
            let twice = rows.values.filter { $0.attempts > 1 }.count
            #expect(twice <= 32 && rows.values.allSatisfy { $0.attempts <= 2 })
            #expect(fixture.emulator.stats.accepted - 300 <= twice)
        }
    }

    @Test func anFCMUnreachableForLongerThanTheBoundFailsItsJobsClearly() async throws {
        try await WorkerFixture.with { fixture in
            try await fixture.register((1...5).map { "tok-gone-\($0)" })
            var configuration = fixture.configuration
            // Nothing listens there: every connection is refused.
            configuration.fcmBaseURL = "https://127.0.0.1:1"
            configuration.longestFCMOutage = .seconds(2)
            let job = try await fixture.campaign()
            let ended = try await fixture.withWorker(configuration) { try await fixture.finished(job, within: .seconds(30)) }
            #expect(ended.status == "failed")
            #expect(ended.error?.hasPrefix("app wowa: FCM unreachable for over 2 s: connect: 127.0.0.1:1") == true, "\(ended.error ?? "")")
            let rows = try await fixture.deliveries(job)
            #expect(
                rows.count == 5 && rows.values.allSatisfy { $0.status == "failed" && $0.attempts == 0 },
                "\(rows.values.map { "\($0.status)/\($0.errorCode ?? "-")/\($0.attempts)" })")
            #expect(rows.values.contains { $0.errorCode == "FCM_UNREACHABLE" })
        }
    }
}
