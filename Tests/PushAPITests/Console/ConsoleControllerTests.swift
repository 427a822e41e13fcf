import DeviceRegistry
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import TestSupport
import Testing

@testable import PushAPI

/// The console's pages through HTTP, signed in, against a seeded database.
@Suite("Console pages")
struct ConsoleControllerTests {
    static let hostileTitle = #"<script>alert("title")</script>" onmouseover="alert(1)"#
    static let hostileError = #"<img src=x onerror="alert('fcm')">"#

    /// The text of `<dt>label</dt><dd>…</dd>` on a page.
    static func figure(_ label: String, in html: String) -> String? {
        html.firstMatch(of: try! Regex("<dt>\(label)</dt><dd>(.*?)</dd>")).flatMap { $0.output[1].substring.map(String.init) }
    }

    @Test func theOverviewShowsEachAppsDevicesJobsQueueAndLastDay() async throws {
        let fixture = try await APIFixture.make()
        let (running, queued) = try await fixture.database.seed { seed in
            let app = fixture.appID
            let (d1, d2, d3) = (
                try await seed.device(app: app, user: 1, token: "t1"), try await seed.device(app: app, user: 2, token: "t2"),
                try await seed.device(app: app, user: 3, token: "t3")
            )
            try await seed.run(
                "UPDATE push_devices SET is_active = false, deactivated_at = now(), deactivation_reason = 'logout' WHERE id = \(d3)")
            let running = try await seed.job(users: [1, 2])
            try await seed.run(
                "UPDATE push_jobs SET status = 'running', started_at = now(), audience_complete = true WHERE id = \(running)")
            try await seed.delivery(job: running, device: d1, status: .sent, attempts: 1)
            try await seed.delivery(job: running, device: d2, status: .pending, errorCode: "UNAVAILABLE", attempts: 1)
            let queued = try await seed.job(users: [1])
            _ = try await JobDirectory(client: seed.client, logger: apiLogger).enqueue(
                appCode: "wowa", userIDs: [1], platforms: nil, message: #"{"notification":{"title":"later"}}"#, idempotencyKey: nil,
                sendAt: Date().addingTimeInterval(3600), dryRun: false
            ).id
            let ended = try await seed.job(users: [3])
            try await seed.delivery(job: ended, device: d3, status: .failed, errorCode: "UNREGISTERED", attempts: 1)
            try await seed.run(
                "UPDATE push_jobs SET status = 'completed', finished_at = now(), audience_complete = true WHERE id = \(ended)")
            _ = try await seed.app("empty")
            return (running, queued)
        }
        _ = queued
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            let page = try await browser.get(client, "/console")
            #expect(page.status == .ok)
            let html = page.text
            let wowa = try #require(html.range(of: #"<h2 id="app-\#(fixture.appID)">Wowa"#))
            let card = String(html[wowa.lowerBound...].prefix(while: { _ in true }).split(separator: "</section>")[0])
            #expect(Self.figure("Active devices", in: card) == "2")
            #expect(Self.figure("Inactive devices", in: card) == "1")
            #expect(Self.figure("Jobs running", in: card) == "1")
            #expect(Self.figure("Jobs queued", in: card) == "2", "the scheduled one is queued too")
            #expect(Self.figure("Queue depth", in: card) == "2", "a retry waiting and the due job's one device; not the scheduled job")
            #expect(
                Self.figure("Oldest due job", in: card)?.hasPrefix(#"<a href="/console/jobs/\#(running)">#\#(running)</a>, due "#) == true)
            #expect(
                card.contains("sent 1") && card.contains("failed 1") && card.contains("skipped 0") && card.contains("waiting to retry 1"))
            #expect(
                card.contains(#"<svg class="chart""#) && card.contains(#"<rect class="sent""#) && card.contains(#"<rect class="failed""#))
            #expect(card.contains("no credentials: its jobs fail"))
            #expect(html.contains(#"Empty <span class="muted">(empty)</span>"#), "an app without anything still has its card")
        }
    }

    @Test func jobsAreListedNewestFirstFilteredAndPagedByKeyset() async throws {
        let fixture = try await APIFixture.make()
        let (campaign, single) = try await fixture.database.seed { seed in
            let other = try await seed.app("other")
            try await seed.run(
                """
                INSERT INTO push_jobs (app_id, user_ids, message, priority)
                SELECT \(fixture.appID), ARRAY[g], '{"notification":{"title":"bulk news"}}', 'normal' FROM generate_series(1, 52) g
                """)
            _ = other
            let campaign = try await seed.job(app: "other", users: nil)
            let single = try await seed.job(users: [7])
            return (campaign, single)
        }
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            func ids(_ html: String) -> [Int64] { html.matches(of: /<td><a href="\/console\/jobs\/(\d+)">/).compactMap { Int64($0.1) } }

            let first = try await browser.get(client, "/console/jobs")
            let firstIDs = ids(first.text)
            #expect(firstIDs.count == 50 && firstIDs == firstIDs.sorted(by: >) && firstIDs.first == single)
            let older = try #require(first.text.firstMatch(of: /<a class="next" href="([^"]+)">/).map { String($0.1) })
            #expect(older == "/console/jobs?before=\(firstIDs.last!)")
            let second = try await browser.get(client, older.replacingOccurrences(of: "&amp;", with: "&"))
            let secondIDs = ids(second.text)
            #expect(secondIDs.count == 4 && secondIDs.allSatisfy { $0 < firstIDs.last! } && !second.text.contains(#"class="next""#))
            #expect(first.text.contains("<progress value=\"0\" max=\"100\" aria-label=\"0 % done\">"), "a progress bar per job")

            let byApp = try await browser.get(client, "/console/jobs?app=other&status=&kind=&priority=")
            #expect(ids(byApp.text) == [campaign])
            #expect(byApp.text.contains(#"<option value="other" selected>other</option>"#))
            #expect(ids(try await browser.get(client, "/console/jobs?kind=campaign").text) == [campaign])
            #expect(ids(try await browser.get(client, "/console/jobs?kind=single&priority=high").text) == [single])
            #expect(ids(try await browser.get(client, "/console/jobs?priority=normal").text).count == 50)
            #expect(ids(try await browser.get(client, "/console/jobs?status=completed").text).isEmpty)
            let paged = try await browser.get(client, "/console/jobs?priority=normal")
            #expect(paged.text.contains("priority=normal&amp;before="), "the next page keeps the filters")
        }
    }

    @Test func aJobsPageShowsWhatWasSentItsOutcomesAndFailuresAsText() async throws {
        let fixture = try await APIFixture.make()
        let job = try await fixture.database.seed { seed in
            let job = try await JobDirectory(client: seed.client, logger: apiLogger).enqueue(
                appCode: "wowa", userIDs: [1, 2, 3], platforms: nil,
                message:
                    #"{"notification":{"title":\#(String(decoding: try JSONEncoder().encode(Self.hostileTitle), as: UTF8.self))},"data":{"k":"v"}}"#,
                idempotencyKey: "order-1", sendAt: nil, dryRun: true
            ).id
            let devices = [
                try await seed.device(app: fixture.appID, user: 1, token: "token-one-0123456789abcdef"),
                try await seed.device(app: fixture.appID, user: 2, token: "token-two-0123456789abcdef"),
                try await seed.device(app: fixture.appID, user: 3, token: "token-three-0123456789abcdef"),
            ]
            try await seed.run("UPDATE push_jobs SET status = 'running', audience_complete = true WHERE id = \(job)")
            try await seed.delivery(job: job, device: devices[0], status: .sent, attempts: 1)
            try await seed.delivery(
                job: job, device: devices[1], status: .failed, errorCode: "INVALID_ARGUMENT",
                errorMessage: Self.hostileError, attempts: 1)
            try await seed.delivery(job: job, device: devices[2], status: .failed, errorCode: "UNREGISTERED", attempts: 1)
            return job
        }
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            let page = try await browser.get(client, "/console/jobs/\(job)")
            let html = page.text
            #expect(page.status == .ok)
            #expect(html.contains(#"<meta http-equiv="refresh" content="2">"#), "running: the page follows it")
            #expect(html.contains("3 users&#39; active devices"))
            #expect(html.contains("<dt>Idempotency key</dt><dd>order-1</dd>"))
            #expect(html.contains("yes: FCM checks every message, nothing is delivered"))
            #expect(html.contains("<tr><td>failed</td><td>INVALID_ARGUMENT</td><td>1</td></tr>"))
            #expect(html.contains("<tr><td>failed</td><td>UNREGISTERED</td><td>1</td></tr>"))
            #expect(html.contains("<tr><td>sent</td><td>-</td><td>1</td></tr>"))
            #expect(html.contains(#"<progress value="100" max="100""#) && html.contains("100 %"))
            #expect(html.contains("token-thr"), "masked tokens")
            #expect(!html.contains("token-three-0123456789abcdef"))
            // User-controlled text is text: no tag or attribute of it survives.
            #expect(!html.contains("<script>") && !html.contains("<img") && !html.contains(#"" onmouseover=""#))
            #expect(html.contains("&lt;script&gt;alert(\\&quot;title\\&quot;)&lt;/script&gt;"), "the title inside the message JSON")
            #expect(html.contains("&lt;img src=x onerror=&quot;alert(&#39;fcm&#39;)&quot;&gt;"))

            let list = try await browser.get(client, "/console/jobs")
            #expect(list.text.contains("<td>&lt;script&gt;alert(&quot;title&quot;)&lt;/script&gt;&quot; onmouseover=&quot;alert(1)</td>"))
            #expect(!list.text.contains("<script>"))
        }
    }

    /// The rows of the job page's "sends over time" table: (slot start, sent, failed, skipped, waiting to retry).
    static func sendsRows(_ html: String) -> [[String]] {
        guard let section = html.range(of: #"<h2 id="over-time">"#) else { return [] }
        return html[section.upperBound...].matches(
            of: /<tr><td>([^<]+)<\/td><td>(\d+)<\/td><td>(\d+)<\/td><td>(\d+)<\/td><td>(\d+)<\/td><\/tr>/
        )
        .map { [String($0.1), String($0.2), String($0.3), String($0.4), String($0.5)] }
    }

    @Test func aJobsPageChartsItsSendsOverTimeInSlotsSizedToItsSpan() async throws {
        let fixture = try await APIFixture.make()
        let (short, long, unsent) = try await fixture.database.seed { seed in
            var devices: [Int64] = []
            for user in 1...5 {
                devices.append(try await seed.device(app: fixture.appID, user: Int64(user), token: "chart-token-\(user)-0123456789"))
            }
            let (short, long, unsent) = (
                try await seed.job(users: [1, 2, 3, 4, 5]), try await seed.job(users: [1, 2, 3]), try await seed.job()
            )
            func ran(_ job: Int64, from: String, to: String) async throws {
                try await seed.run(
                    """
                    UPDATE push_jobs SET status = 'completed', audience_complete = true, started_at = \(from)::timestamptz,
                           finished_at = \(to)::timestamptz WHERE id = \(job)
                    """)
            }
            func delivered(_ job: Int64, _ device: Int64, _ status: String, at time: String) async throws {
                try await seed.run(
                    """
                    INSERT INTO push_deliveries (job_id, device_id, status, attempts, created_at, updated_at, job_created_at, app_id)
                    SELECT \(job), \(device), \(status), 1, \(time)::timestamptz, \(time)::timestamptz, created_at, app_id
                      FROM push_jobs WHERE id = \(job)
                    """)
            }
            // 30 seconds: slots of a second.
            try await ran(short, from: "2026-11-21 14:00:00Z", to: "2026-11-21 14:00:30Z")
            try await delivered(short, devices[0], "sent", at: "2026-11-21 14:00:00.4Z")
            try await delivered(short, devices[1], "sent", at: "2026-11-21 14:00:00.9Z")
            try await delivered(short, devices[2], "failed", at: "2026-11-21 14:00:07Z")
            try await delivered(short, devices[3], "pending", at: "2026-11-21 14:00:29Z")
            try await delivered(short, devices[4], "skipped", at: "2026-11-21 14:00:29.5Z")
            // 60 hours: slots of 2 hours.
            try await ran(long, from: "2026-11-20 00:00:00Z", to: "2026-11-22 12:00:00Z")
            try await delivered(long, devices[0], "sent", at: "2026-11-20 01:30:00Z")
            try await delivered(long, devices[1], "failed", at: "2026-11-21 13:59:59Z")
            try await delivered(long, devices[2], "sent", at: "2026-11-22 11:00:00Z")
            return (short, long, unsent)
        }
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            let shortPage = try await browser.get(client, "/console/jobs/\(short)").text
            #expect(
                Self.sendsRows(shortPage) == [
                    ["2026-11-21 14:00:00 UTC", "2", "0", "0", "0"], ["2026-11-21 14:00:07 UTC", "0", "1", "0", "0"],
                    ["2026-11-21 14:00:29 UTC", "0", "0", "1", "1"],
                ])
            #expect(shortPage.contains("<caption>Deliveries by second of their first outcome"))
            #expect(shortPage.contains(#"<svg class="chart" viewBox="0 0 480 140" role="img" aria-labelledby="sends-title sends-desc">"#))
            #expect(
                shortPage.contains(
                    #"<title id="sends-title">Sends of this job by second, from 2026-11-21 14:00:00 UTC to 2026-11-21 14:00:31 UTC</title>"#
                ))
            #expect(shortPage.contains("sent 2, failed 1, skipped 1, waiting to retry 1; busiest second 2"))
            // 31 bars, each its second's outcomes stacked.
            let bars = shortPage.matches(
                of: /<rect class="(\w+)" x="[0-9.]+" y="[0-9.]+" width="([0-9.]+)" height="[0-9.]+"><title>([^<]+)<\/title>/)
            #expect(
                bars.map { "\($0.1) \($0.3)" } == [
                    "sent 14:00:00: 2 sent", "failed 14:00:07: 1 failed", "skipped 14:00:29: 1 skipped", "pending 14:00:29: 1 pending",
                ])
            #expect(bars.allSatisfy { $0.2 == "13.5" }, "480 / 31 wide, less the gap")

            let longPage = try await browser.get(client, "/console/jobs/\(long)").text
            #expect(
                Self.sendsRows(longPage) == [
                    ["2026-11-20 00:00:00 UTC", "1", "0", "0", "0"], ["2026-11-21 12:00:00 UTC", "0", "1", "0", "0"],
                    ["2026-11-22 10:00:00 UTC", "1", "0", "0", "0"],
                ])
            #expect(longPage.contains("<caption>Deliveries by 2 hours of their first outcome"))
            #expect(longPage.contains("<title>11-21 12:00: 1 failed</title>") && longPage.contains(">11-20 00:00</text>"))

            let unsentPage = try await browser.get(client, "/console/jobs/\(unsent)").text
            #expect(unsentPage.contains("Nothing sent yet.") && Self.sendsRows(unsentPage).isEmpty && !unsentPage.contains("<svg"))
        }
    }

    @Test func cancellingAsksFirstThenEndsTheJob() async throws {
        let fixture = try await APIFixture.make()
        let job = try await fixture.database.seed { try await $0.job() }
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            let page = try await browser.get(client, "/console/jobs/\(job)")
            #expect(page.text.contains(#"<a class="button danger" href="/console/jobs/\#(job)/cancel">Cancel this job…</a>"#))
            let confirmation = try await browser.get(client, "/console/jobs/\(job)/cancel")
            #expect(confirmation.status == .ok && confirmation.text.contains("Yes, cancel job #\(job)"))
            #expect(try await fixture.database.text("SELECT status FROM push_jobs WHERE id = \(job)") == "queued", "asking changes nothing")
            let csrf = try #require(ConsoleBrowser.csrfToken(in: confirmation.text))
            let cancelled = try await browser.post(client, "/console/jobs/\(job)/cancel", [("csrf", csrf)])
            #expect(cancelled.status == .seeOther && cancelled.headers[.location] == "/console/jobs/\(job)")
            #expect(try await fixture.database.text("SELECT status FROM push_jobs WHERE id = \(job)") == "cancelled")
            let after = try await browser.get(client, "/console/jobs/\(job)")
            #expect(after.text.contains(#"<span class="status cancelled">cancelled</span>"#))
            #expect(!after.text.contains("Cancel this job") && !after.text.contains("http-equiv=\"refresh\""))
            let again = try await browser.post(client, "/console/jobs/\(job)/cancel", [("csrf", csrf)])
            #expect(again.status == .conflict && again.text.contains("Job #\(job) is already cancelled."))
        }
    }
}
