import FCMEmulator
import Foundation
import Testing

@Suite("Latency profiles")
struct LatencyProfileTests {
    @Test("the text form parses into shares, spaces after commas allowed")
    func parses() throws {
        let profile = try LatencyProfile(parsing: "50%:30ms, 39%:60ms,10%:150ms,1%:2s")
        #expect(profile.shares.map(\.percent) == [50, 39, 10, 1])
        #expect(profile.shares.map(\.delay) == [.milliseconds(30), .milliseconds(60), .milliseconds(150), .seconds(2)])
        let fine = try LatencyProfile(parsing: "99.9%:0ms,0.1%:1.5s")
        #expect(fine.shares.map(\.percent) == [99.9, 0.1])
        #expect(fine.shares.map(\.delay) == [.zero, .milliseconds(1500)])
    }

    @Test(
        "bad profiles are refused with the entry at fault",
        arguments: [
            ("", LatencyProfileError.empty),
            ("50%:30ms,50%", .malformedShare("50%")),
            ("50:30ms,50%:1s", .malformedShare("50:30ms")),
            ("0%:1ms,100%:2ms", .invalidPercentage("0%:1ms")),
            ("33.33333%:1ms,66.66667%:2ms", .invalidPercentage("33.33333%:1ms")),
            ("x%:1ms", .invalidPercentage("x%:1ms")),
            ("100%:30", .invalidDelay("100%:30")),
            ("100%:1e3ms", .invalidDelay("100%:1e3ms")),
            ("100%:-1ms", .invalidDelay("100%:-1ms")),
            ("100%:2h", .invalidDelay("100%:2h")),
            ("100%:3601s", .invalidDelay("100%:3601s")),
            ("50%:30ms,40%:1s", .sharesDoNotAddUpTo100(totalPercent: 90)),
            ("60%:1ms,50%:1ms", .sharesDoNotAddUpTo100(totalPercent: 110)),
        ]
    )
    func refuses(_ text: String, _ expected: LatencyProfileError) {
        #expect(throws: expected) { try LatencyProfile(parsing: text) }
    }

    @Test("error texts say what is wrong and what is expected")
    func errorTexts() {
        #expect(
            LatencyProfileError.sharesDoNotAddUpTo100(totalPercent: 90).description.hasPrefix("the percentages add up to 90%, not 100%"))
        #expect(LatencyProfileError.malformedShare("50%").description.contains("e.g. 50%:30ms,39%:60ms,10%:150ms,1%:2s"))
        #expect(LatencyProfileError.invalidDelay("100%:30").description.contains("ms or s"))
    }

    @Test("samples follow the shares")
    func sampling() throws {
        let profile = try LatencyProfile(parsing: "50%:30ms,39%:60ms,10%:150ms,1%:2s")
        let draws = 100_000
        var counts: [Duration: Int] = [:]
        for _ in 0..<draws {
            counts[profile.sample(), default: 0] += 1
        }
        #expect(Set(counts.keys) == Set(profile.shares.map(\.delay)))
        // A share's standard deviation over 100k draws is at most 0.16 points.
        for share in profile.shares {
            let observed = Double(counts[share.delay, default: 0]) / Double(draws) * 100
            #expect(abs(observed - share.percent) < 1, "\(share.delay): \(observed)% for \(share.percent)%")
        }
    }

    @Test("a delivered send waits a delay drawn from the profile")
    func sendWaits() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with(.init(latency: try LatencyProfile(parsing: "100%:300ms"))) { session in
            let accessToken = try await session.accessToken(for: fixture)
            let started = ContinuousClock.now
            let result = try await session.send(accessToken: accessToken, body: EmulatorSession.message(token: "waits"))
            #expect(result.status == 200)
            #expect(ContinuousClock.now - started >= .milliseconds(300))

            session.emulator.setLatency(try LatencyProfile(parsing: "100%:1s"))
            let slower = ContinuousClock.now
            #expect(try await session.send(accessToken: accessToken, body: EmulatorSession.message(token: "slower")).status == 200)
            #expect(ContinuousClock.now - slower >= .seconds(1))

            session.emulator.setLatency(nil)
            let quick = ContinuousClock.now
            #expect(try await session.send(accessToken: accessToken, body: EmulatorSession.message(token: "quick")).status == 200)
            #expect(ContinuousClock.now - quick < .seconds(1))
        }
    }

    @Test("a scripted delay wins, and failures and dry runs do not wait")
    func whatDoesNotWait() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with(.init(latency: try LatencyProfile(parsing: "100%:60s"))) { session in
            let accessToken = try await session.accessToken(for: fixture)
            session.emulator.script(token: "scripted-slow", .slow(.milliseconds(100)))
            session.emulator.script(token: "gone", .unregistered)
            let started = ContinuousClock.now
            #expect(try await session.send(accessToken: accessToken, body: EmulatorSession.message(token: "scripted-slow")).status == 200)
            #expect(try await session.send(accessToken: accessToken, body: EmulatorSession.message(token: "gone")).status == 404)
            let dryRun = #"{"validate_only":true,"message":{"token":"dry"}}"#
            #expect(try await session.send(accessToken: accessToken, body: dryRun).status == 200)
            #expect(ContinuousClock.now - started < .seconds(20))
        }
    }

    @Test("the admin API sets and clears the profile, and refuses a bad one with its reason")
    func adminAPI() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            let accessToken = try await session.accessToken(for: fixture)
            let json = [("Content-Type", "application/json")]
            #expect(try await session.request(.POST, "/emulator/latency", body: #"{"profile":"100%:1s"}"#, headers: json).status == 204)
            let started = ContinuousClock.now
            #expect(try await session.send(accessToken: accessToken, body: EmulatorSession.message(token: "waits")).status == 200)
            #expect(ContinuousClock.now - started >= .seconds(1))

            let bad = try await session.request(.POST, "/emulator/latency", body: #"{"profile":"50%:30ms"}"#, headers: json)
            #expect(bad.status == 400)
            #expect((bad.json["error"] as? String)?.hasPrefix("the percentages add up to 50%") == true)
            #expect(try await session.request(.POST, "/emulator/latency", body: #"{"profil":null}"#, headers: json).status == 400)

            #expect(try await session.request(.POST, "/emulator/latency", body: #"{"profile":null}"#, headers: json).status == 204)
            let quick = ContinuousClock.now
            #expect(try await session.send(accessToken: accessToken, body: EmulatorSession.message(token: "quick")).status == 200)
            #expect(ContinuousClock.now - quick < .seconds(1))
        }
    }
}
