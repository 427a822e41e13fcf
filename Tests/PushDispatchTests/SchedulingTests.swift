import DeviceRegistry
import FCMEmulator
import Foundation
import PostgresNIO
import TestSupport
import Testing

@testable import PushDispatch

/// Priorities, fairness between apps, per-app rate caps and expiry, through the worker against
/// fcm-emulator and a real database.
@Suite("Scheduling: priorities, fairness, rate caps, expiry")
struct SchedulingTests {
    /// `count` active Android devices of `app` for users 1…count, tokens `<prefix>-<n>`.
    static func seed(_ fixture: WorkerFixture, app: Int64, prefix: String, count: Int) async throws {
        _ = try await fixture.sql { client in
            try await client.query(
                """
                INSERT INTO push_devices (app_id, user_id, token, platform)
                SELECT \(app), g, \(prefix) || '-' || g, 'android' FROM generate_series(1, \(count)) g
                """)
        }
    }

    static func value<T: PostgresDecodable & Sendable>(_ fixture: WorkerFixture, _ query: PostgresQuery, as: T.Type) async throws -> T {
        try await fixture.sql { client in
            for try await value in try await client.query(query).decode(T.self) { return value }
            throw CancellationError()
        }
    }

    static func enqueue(_ fixture: WorkerFixture, app: String = "wowa", users: [Int64]) async throws -> Int64 {
        try await value(
            fixture, "SELECT push_enqueue(app_code => \(app), user_ids => \(users), message => '{\"notification\":{\"title\":\"Hi\"}}')",
            as: Int64.self)
    }

    static func campaign(_ fixture: WorkerFixture, app: String, priority: JobPriority = .bulk) async throws -> Int64 {
        try await value(
            fixture,
            """
            SELECT push_enqueue_campaign(app_code => \(app), message => '{"notification":{"title":"All"}}', \
            priority => \(priority.rawValue))
            """,
            as: Int64.self)
    }

    static func sent(_ fixture: WorkerFixture, _ job: Int64) async throws -> Int {
        try await value(fixture, "SELECT count(*)::int FROM push_deliveries WHERE job_id = \(job) AND status = 'sent'", as: Int.self)
    }

    /// A worker whose sends take ~20 ms, so that a campaign of a few thousand devices runs for
    /// seconds with far more deliveries ready than in flight.
    static func slowWorker(_ fixture: WorkerFixture) throws -> DispatchConfiguration {
        fixture.emulator.setLatency(try LatencyProfile(parsing: "100%:20ms"))
        var configuration = fixture.configuration
        configuration.concurrency = 32
        return configuration
    }

    /// Whether the campaign is of the single's app or another's, and sent as `bulk` (campaigns'
    /// default) or as `high`, as a single is (or as a job to thousands of users is by default).
    @Test(arguments: [false, true], [JobPriority.bulk, .high])
    func aSingleNotificationGoesOutAheadOfACampaignUnderway(otherApp: Bool, campaignPriority: JobPriority) async throws {
        try await WorkerFixture.with { fixture in
            try await Self.seed(fixture, app: fixture.appID, prefix: "tok-bulk", count: 2000)
            let singleApp = otherApp ? "chat" : "wowa"
            if otherApp {
                try await Self.seed(fixture, app: try await fixture.addOtherApp(code: "chat"), prefix: "tok-chat", count: 10)
            }
            let configuration = try Self.slowWorker(fixture)
            let campaign = try await Self.campaign(fixture, app: "wowa", priority: campaignPriority)
            let (single, campaignSentThen) = try await fixture.withWorker(configuration) {
                // The campaign is in full flow: twice the capacity claimed, its audience mostly unexpanded.
                while try await Self.sent(fixture, campaign) < 200 { try await Task.sleep(for: .milliseconds(20)) }
                let single = try await Self.enqueue(fixture, app: singleApp, users: [3])
                #expect(try await fixture.finished(single, within: .seconds(20)).status == "completed")
                let sentThen = try await Self.sent(fixture, campaign)
                #expect(try await fixture.finished(campaign, within: .seconds(60)).status == "completed")
                return (single, sentThen)
            }
            #expect(try await Self.sent(fixture, single) == 1)
            // It did not wait for the campaign's audience: most of it was still to go.
            #expect(campaignSentThen < 1000, "the campaign had sent \(campaignSentThen) of 2000 when the single was recorded")
            #expect(try await Self.value(fixture, "SELECT priority FROM push_jobs WHERE id = \(single)", as: String.self) == "high")
            #expect(
                try await Self.value(fixture, "SELECT priority FROM push_jobs WHERE id = \(campaign)", as: String.self)
                    == campaignPriority.rawValue)
        }
    }

    /// Two apps' campaigns, or two campaigns of one app (both to its 1000 devices).
    @Test(arguments: [false, true])
    func twoCampaignsShareTheWorkerInsteadOfQueueing(sameApp: Bool) async throws {
        try await WorkerFixture.with { fixture in
            try await Self.seed(fixture, app: fixture.appID, prefix: "tok-a", count: 1000)
            if !sameApp { try await Self.seed(fixture, app: try await fixture.addOtherApp(code: "shop"), prefix: "tok-b", count: 1000) }
            let configuration = try Self.slowWorker(fixture)
            let first = try await Self.campaign(fixture, app: "wowa")
            let second = try await Self.campaign(fixture, app: sameApp ? "wowa" : "shop")
            let secondSentThen = try await fixture.withWorker(configuration) {
                #expect(try await fixture.finished(first, within: .seconds(60)).status == "completed")
                let sentThen = try await Self.sent(fixture, second)
                #expect(try await fixture.finished(second, within: .seconds(60)).status == "completed")
                return sentThen
            }
            // Side by side: when the first finished, the second was well under way (one after
            // the other, it would have had at most the few deliveries claimed ahead).
            #expect(secondSentThen >= 500, "the second campaign had sent \(secondSentThen) of 1000 when the first completed")
            #expect(try await Self.sent(fixture, second) == 1000)
        }
    }

    @Test func aRateCapHoldsForTheAppAcrossWorkers() async throws {
        try await WorkerFixture.with { fixture in
            try await Self.seed(fixture, app: fixture.appID, prefix: "tok-capped", count: 300)
            _ = try await fixture.sql { client in
                try await client.query("UPDATE apps SET max_sends_per_second = 100 WHERE id = \(fixture.appID)")
            }
            let job = try await Self.campaign(fixture, app: "wowa")
            let workers = (1...2).map { index in
                var configuration = fixture.configuration
                configuration.workerName = "capped-\(index)"
                return WorkerService(configuration: configuration)
            }
            let status = try await fixture.withWorkers(workers) { try await fixture.finished(job, within: .seconds(30)).status }
            #expect(status == "completed")
            #expect(try await Self.sent(fixture, job) == 300)
            // A second's worth at once, then 100 a second: the last of 300 is granted two seconds
            // after the first, whatever the two workers could do together. Timed from the job's
            // start (its first expansion, right after the first grant), not from its first row,
            // whose write also waits for the first sends' access token and connection.
            let span = try await Self.value(
                fixture,
                """
                SELECT extract(epoch FROM max(d.created_at) - j.started_at)::float8
                  FROM push_deliveries d JOIN push_jobs j ON j.id = d.job_id WHERE d.job_id = \(job) GROUP BY j.started_at
                """, as: Double.self)
            #expect(span >= 1.6, "300 deliveries capped at 100/s took \(span) s")
            let firstHalfSecond = try await Self.value(
                fixture,
                """
                SELECT count(*)::int FROM push_deliveries
                 WHERE job_id = \(job) AND created_at < (SELECT started_at FROM push_jobs WHERE id = \(job)) + interval '0.5 s'
                """, as: Int.self)
            // The burst (100) and half a second's refill (50) granted in the job's first half
            // second, and slack. Uncapped, all 300 go in its first tenth of a second. (Counted from
            // its first row instead, a first batch slowed by the access token and the connection
            // let the refill add up before the window began.)
            #expect(firstHalfSecond <= 250, "\(firstHalfSecond) deliveries written in the first 0.5 s at a cap of 100/s")
        }
    }

    @Test func anExpiredJobIsSkippedNotSentAndCompletes() async throws {
        try await WorkerFixture.with { fixture in
            try await Self.seed(fixture, app: fixture.appID, prefix: "tok-late", count: 3)
            let job = try await Self.value(
                fixture, "SELECT push_enqueue_campaign(app_code => 'wowa', message => '{}', ttl => interval '1 second')", as: Int64.self)
            // No worker until it expired (an outage, a long queue).
            try await Task.sleep(for: .milliseconds(1200))
            let status = try await fixture.withWorker { try await fixture.finished(job, within: .seconds(10)).status }
            #expect(status == "completed")
            let rows = try await fixture.deliveries(job)
            #expect(rows.count == 3 && rows.values.allSatisfy { $0.status == "skipped" && $0.errorCode == "EXPIRED" && $0.attempts == 0 })
            #expect(rows.values.allSatisfy { $0.errorMessage?.hasPrefix("expired at ") == true })
            #expect(fixture.emulator.stats.accepted == 0)
        }
    }

    @Test func theLifetimeLeftReachesFCM() async throws {
        try await WorkerFixture.with { fixture in
            try await Self.seed(fixture, app: fixture.appID, prefix: "tok-ttl", count: 1)
            let job = try await Self.value(
                fixture,
                "SELECT push_enqueue(app_code => 'wowa', user_ids => ARRAY[1]::bigint[], message => '{}', ttl => interval '1 hour')",
                as: Int64.self)
            let expiry = try await Self.value(
                fixture, "SELECT extract(epoch FROM expires_at)::float8 FROM push_jobs WHERE id = \(job)", as: Double.self)
            let status = try await fixture.withWorker { try await fixture.finished(job).status }
            #expect(status == "completed")
            let accepted = try #require(fixture.emulator.lastAcceptedMessage(for: "tok-ttl-1"))
            let body = try #require(try JSONSerialization.jsonObject(with: Data(accepted.requestBody.utf8)) as? [String: Any])
            let message = try #require(body["message"] as? [String: Any])
            let ttl = try #require((message["android"] as? [String: Any])?["ttl"] as? String)
            let seconds = try #require(Int(ttl.dropLast()))
            #expect(ttl.hasSuffix("s") && (3590...3600).contains(seconds), "android.ttl \(ttl)")
            #expect((message["apns"] as? [String: Any])?["headers"] as? [String: String] == ["apns-expiration": "\(Int(expiry))"])
            #expect(((message["webpush"] as? [String: Any])?["headers"] as? [String: String])?["TTL"] == "\(seconds)")
        }
    }
}
