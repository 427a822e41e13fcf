import DeviceRegistry
import Foundation
import Hummingbird
import HummingbirdTesting
import TestSupport
import Testing

@testable import PushAPI

/// The delivery audit page and its CSV export over HTTP, signed in, on the audit scenario every
/// other surface of the log (DeliveryLog, GET /admin/deliveries, pushctl) is checked against.
@Suite("Console deliveries")
struct ConsoleDeliveriesTests {
    /// The console's query string for one of the scenario's filters.
    static func consoleQuery(_ query: AuditScenario.Query, _ scenario: AuditScenario) -> String {
        ConsoleText.query([
            ("job", query.job.map { String(scenario.jobs[$0]) }), ("user", query.user.map(String.init)),
            ("app", query.app), ("status", query.status?.rawValue), ("since", query.since),
        ])
    }

    /// The delivery ids of a deliveries page, in page order.
    static func pageIDs(_ html: String) -> [Int64] {
        html.matches(of: /<tr>\s*<td>(\d+)<\/td>/).compactMap { Int64($0.1) }
    }

    /// A CSV file's records (RFC 4180: quoted fields may hold commas, doubled quotes and line breaks).
    static func csvRecords(_ text: String) -> [[String]] {
        var records: [[String]] = []
        var record: [String] = []
        var field = ""
        var quoted = false
        var characters = Array(text.unicodeScalars)[...]
        while let character = characters.popFirst() {
            if quoted {
                if character == "\"" {
                    if characters.first == "\"" {
                        field.unicodeScalars.append("\"")
                        characters.removeFirst()
                    } else {
                        quoted = false
                    }
                } else {
                    field.unicodeScalars.append(character)
                }
            } else if character == "\"" {
                quoted = true
            } else if character == "," {
                record.append(field)
                field = ""
            } else if character == "\r", characters.first == "\n" {
                characters.removeFirst()
                record.append(field)
                records.append(record)
                record = []
                field = ""
            } else {
                field.unicodeScalars.append(character)
            }
        }
        if !field.isEmpty || !record.isEmpty {
            record.append(field)
            records.append(record)
        }
        return records
    }

    @Test func everyFilterSelectsTheSameRowsOnThePageAndInTheCSV() async throws {
        let fixture = try await APIFixture.make()
        let scenario = try await fixture.database.seed { try await AuditScenario.seed($0.client) }
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            for query in AuditScenario.queries {
                let parameters = Self.consoleQuery(query, scenario)
                let page = try await browser.get(client, "/console/deliveries?" + parameters)
                #expect(page.status == .ok, "\(query)")
                #expect(Self.pageIDs(page.text) == query.expectedIDs(scenario), "\(query)")

                let csvLink = try #require(page.text.firstMatch(of: /<a class="button" href="([^"]+)" download>/).map { String($0.1) })
                #expect(
                    csvLink == "/console/deliveries.csv"
                        + (parameters.isEmpty ? "" : "?" + parameters).replacingOccurrences(of: "&", with: "&amp;"),
                    "the export link carries the page's filter")
                let csv = try await browser.get(client, csvLink.replacingOccurrences(of: "&amp;", with: "&"))
                #expect(csv.status == .ok)
                #expect(csv.headers[.contentType] == "text/csv; charset=utf-8")
                #expect(csv.headers[.contentDisposition] == #"attachment; filename="deliveries.csv""#)
                let records = Self.csvRecords(csv.text)
                #expect(records.first == DeliveryCSV.columns)
                #expect(records.dropFirst().compactMap { Int64($0[0]) } == query.expectedIDs(scenario), "\(query)")
                #expect(records.allSatisfy { $0.count == DeliveryCSV.columns.count })
                #expect(!csv.text.contains("secret-tail") && !page.text.contains("secret-tail"), "tokens are masked")
            }
        }
    }

    @Test func aCSVRowHoldsTheWholeDeliveryTokenMasked() async throws {
        let fixture = try await APIFixture.make()
        let scenario = try await fixture.database.seed { try await AuditScenario.seed($0.client) }
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            let csv = try await browser.get(client, "/console/deliveries.csv?status=failed")
            let records = Self.csvRecords(csv.text)
            #expect(records.count == 2)
            let row = Dictionary(uniqueKeysWithValues: zip(DeliveryCSV.columns, records[1]))
            #expect(row["id"] == String(scenario.deliveries[1]) && row["job_id"] == String(scenario.jobs[0]))
            #expect(row["user_id"] == "2" && row["app"] == "wowa" && row["platform"] == "android")
            #expect(row["token"] == AuditScenario.masked(1))
            #expect(row["status"] == "failed" && row["attempts"] == "2" && row["updated_at"] == "2020-06-01T00:00:00.000Z")
            #expect(
                row["error_code"] == AuditScenario.failure.code && row["error_message"] == AuditScenario.failure.message,
                "a message with quotes and a comma comes back whole")
            #expect(row["device_id"] == String(scenario.devices[1]))
            #expect(row["dry_run"] == "false")
            #expect(csv.text.contains(#","Requested entity was not found, ""gone""","#))
        }
    }

    /// A dry run's deliveries carry a badge on the page and `true` in the CSV.
    @Test func aDryRunsDeliveriesAreMarked() async throws {
        let fixture = try await APIFixture.make()
        let scenario = try await fixture.database.seed { seed in
            let scenario = try await AuditScenario.seed(seed.client)
            try await seed.run("UPDATE push_jobs SET validate_only = true WHERE id = \(scenario.jobs[0])")
            return scenario
        }
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            let dryRun = try await browser.get(client, "/console/deliveries?job=\(scenario.jobs[0])")
            let real = try await browser.get(client, "/console/deliveries?job=\(scenario.jobs[1])")
            #expect(
                dryRun.text.contains(#"<span class="badge">dry run</span>"#) && !real.text.contains(#"<span class="badge">dry run</span>"#))
            let csv = Self.csvRecords(try await browser.get(client, "/console/deliveries.csv?job=\(scenario.jobs[0])").text)
            #expect(csv.count > 1 && csv.dropFirst().allSatisfy { $0.last == "true" }, "\(csv)")
        }
    }

    @Test func pagesFollowTheKeysetKeepingTheFilter() async throws {
        let fixture = try await APIFixture.make()
        let ids = try await fixture.database.seed { seed in
            let job = try await seed.job(users: nil)
            try await seed.run(
                """
                INSERT INTO push_devices (user_id, app_id, token, platform)
                SELECT g, \(fixture.appID), 'paging-token-' || g, 'android' FROM generate_series(1, 60) g
                """)
            try await seed.run(
                """
                INSERT INTO push_deliveries (job_id, device_id, status, attempts, job_created_at, app_id)
                SELECT \(job), id, 'sent', 1, (SELECT created_at FROM push_jobs WHERE id = \(job)), app_id
                  FROM push_devices WHERE app_id = \(fixture.appID) ORDER BY id
                """)
            try await seed.run(
                """
                INSERT INTO push_deliveries (job_id, device_id, status, job_created_at, app_id)
                SELECT id, 1, 'skipped', created_at, app_id FROM push_jobs WHERE id = \(try await seed.job(users: [1]))
                """)
            return try await seed.client.query("SELECT id FROM push_deliveries WHERE status = 'sent' ORDER BY id DESC", logger: apiLogger)
                .collect().map { try $0.decode(Int64.self) }
        }
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            let first = try await browser.get(client, "/console/deliveries?status=sent&app=wowa")
            #expect(Self.pageIDs(first.text) == Array(ids.prefix(50)))
            let older = try #require(first.text.firstMatch(of: /<a class="next" href="([^"]+)">/).map { String($0.1) })
            #expect(older == "/console/deliveries?app=wowa&amp;status=sent&amp;before=\(ids[49])")
            let second = try await browser.get(client, older.replacingOccurrences(of: "&amp;", with: "&"))
            #expect(Self.pageIDs(second.text) == Array(ids.dropFirst(50)))
            #expect(!second.text.contains(#"class="next""#), "the last page")
            #expect(
                second.text.contains(#"href="/console/deliveries.csv?app=wowa&amp;status=sent""#),
                "the export is of the filter, not the page")
            #expect(second.text.contains(#"<option value="sent" selected>sent</option>"#))
            #expect(first.text.contains(#"<a href="/console/deliveries" aria-current="page">Deliveries</a>"#))
        }
    }

    @Test func aFilterTheAPIWouldRefuseIsAnErrorPage() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            for (query, message) in [
                ("since=yesterday", "since &#39;yesterday&#39; is not an ISO 8601 time with a zone, such as 2026-12-01T09:00:00Z"),
                ("status=lost", "status must be one of pending, sent, failed, skipped"),
                ("job=0", "job must be a positive integer"),
                ("jobId=1", "unknown query parameter jobId; expected one of app, before, job, since, status, user"),
            ] {
                let page = try await browser.get(client, "/console/deliveries?" + query)
                #expect(page.status == .badRequest, "\(query)")
                #expect(page.text.contains(message), "\(query): \(page.text)")
                let csv = try await browser.get(client, "/console/deliveries.csv?" + query)
                #expect(csv.status == .badRequest && csv.headers[.contentType]?.hasPrefix("text/html") == true, "\(query)")
            }
            let paged = try await browser.get(client, "/console/deliveries.csv?before=5")
            #expect(paged.status == .badRequest, "the export has no pages")
        }
    }

    @Test func theExportNeedsASession() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            let response = try await client.execute(uri: "/console/deliveries.csv", method: .get)
            #expect(response.status == .seeOther)
            #expect(response.headers[.location] == "/console/sign-in")
            #expect(!response.text.contains("id,job_id"))
        }
    }

    @Test func anFCMMessageShapedLikeAFormulaIsExportedAsText() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.database.seed { seed in
            let device = try await seed.device(app: fixture.appID, user: 9, token: "formula-token-0123456789")
            try await seed.delivery(
                job: try await seed.job(users: [9]), device: device, status: .failed, errorCode: "@INVALID",
                errorMessage: "=cmd|' /C calc'!A0", attempts: 1)
        }
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            let csv = try await browser.get(client, "/console/deliveries.csv?user=9")
            let row = try #require(Self.csvRecords(csv.text).last)
            #expect(row[9] == "'@INVALID" && row[10] == "'=cmd|' /C calc'!A0")
            #expect(!csv.text.contains(",=") && !csv.text.contains(",@"))
        }
    }
}
