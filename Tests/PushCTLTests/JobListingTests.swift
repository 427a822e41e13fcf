import DeviceRegistry
import Foundation
import TestSupport
import Testing
import WireFormats

/// What `pushctl jobs` and `pushctl job ID` show of a job, against a real database.
@Suite("pushctl jobs and job: what a job shows")
struct JobListingTests {
    let pushctl = BuiltProduct("pushctl")

    /// App wowa with users 1 and 2's devices.
    func setUp() async throws -> (TestDatabase, [String: String]) {
        let database = try await TestPostgres.shared.makeDatabase()
        try await database.seed { seed in
            let app = try await seed.app("wowa")
            for user: Int64 in 1...2 { _ = try await seed.device(app: app, user: user, token: "listing-token-\(user)") }
        }
        return (database, ["DATABASE_URL": database.url])
    }

    func run(_ arguments: [String], _ environment: [String: String], sourceLocation: SourceLocation = #_sourceLocation) async throws
        -> String
    {
        let result = try await pushctl.run(arguments, environment: environment)
        #expect(result.status == 0, "\(arguments): \(result.stderr)", sourceLocation: sourceLocation)
        return result.stdout
    }

    /// The `pushctl jobs` table as one dictionary per row, keyed by the header's names. Columns
    /// start where the header's names do (a name may hold one space: SEND AT).
    static func table(_ text: String) -> [[String: String]] {
        let lines = text.split(separator: "\n").map(Array.init)
        guard let header = lines.first else { return [] }
        var starts: [Int] = []
        for index in header.indices
        where header[index] != " " && (index == 0 || index >= 2 && header[index - 2] == " " && header[index - 1] == " ") {
            starts.append(index)
        }
        func cells(_ line: [Character]) -> [String] {
            starts.indices.map { column in
                let start = min(starts[column], line.count)
                let end = column + 1 < starts.count ? min(starts[column + 1], line.count) : line.count
                return String(line[start..<end]).trimmingCharacters(in: .whitespaces)
            }
        }
        let names = cells(header)
        return lines.dropFirst().map { Dictionary(uniqueKeysWithValues: zip(names, cells($0))) }
    }

    @Test func aJobCancelledBeforeItRanShowsItsAudienceAsNotCounted() async throws {
        let (database, env) = try await setUp()
        let ran = try await database.seed { seed in
            let job = try await seed.job(users: [1, 2])
            for device in try await [
                seed.value("SELECT min(id) FROM push_devices", as: Int64.self),
                seed.value("SELECT max(id) FROM push_devices", as: Int64.self),
            ] {
                try await seed.delivery(job: job, device: try #require(device), status: .sent)
            }
            try await seed.expanded(job)
            try await seed.run("UPDATE push_jobs SET status = 'completed', started_at = now(), finished_at = now() WHERE id = \(job)")
            return job
        }
        let tomorrow = WireJSON.formatted(Date().addingTimeInterval(86_400))
        let scheduled = try await run(["send", "--app", "wowa", "--user", "1", "--user", "2", "--title", "Later", "--at", tomorrow], env)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(try await run(["job", scheduled], env).contains("audience 2: sent 0, failed 0, skipped 0, pending 2"))
        #expect(try await run(["cancel", scheduled], env) == "job \(scheduled) cancelled\n")

        let detail = try await run(["job", scheduled], env)
        #expect(
            detail.contains("job \(scheduled) (app wowa): cancelled")
                && detail.contains("audience not counted: sent 0, failed 0, skipped 0, pending 0"),
            "\(detail)")
        #expect(try await run(["job", String(ran)], env).contains("audience 2: sent 2, failed 0, skipped 0, pending 0"))
        let rows = Self.table(try await run(["jobs"], env))
        try #require(rows.count == 2, "\(rows)")
        #expect(
            rows[0]["ID"] == scheduled && rows[0]["STATUS"] == "cancelled" && rows[0]["AUDIENCE"] == "-" && rows[0]["SENT"] == "0",
            "\(rows[0])")
        #expect(
            rows[1]["ID"] == String(ran) && rows[1]["STATUS"] == "completed" && rows[1]["AUDIENCE"] == "2" && rows[1]["SENT"] == "2",
            "\(rows[1])")
    }

    /// A campaign, a dry-run single send, a message without a title, and a title too long for its column.
    @Test func jobsShowKindDryRunAndTitle() async throws {
        let (_, env) = try await setUp()
        func queue(_ arguments: [String]) async throws -> String {
            try await run(arguments + ["--app", "wowa"], env).trimmingCharacters(in: .whitespacesAndNewlines)
        }
        let campaign = try await queue(["campaign", "--title", "Daily digest"])
        let dryRun = try await queue(["send", "--user", "1", "--title", "Welcome back", "--dry-run"])
        let untitled = try await queue(["send", "--user", "2", "--message", #"{"data":{"kind":"sync"}}"#])
        let long = String(repeating: "Very long title ", count: 4) + "\nwith a second line"
        let clipped = try await queue(["campaign", "--title", long])

        let output = try await run(["jobs"], env)
        let header = try #require(output.split(separator: "\n").first)
        #expect(
            header.hasPrefix("ID") && header.contains("  KIND  ") && header.contains("  DRY RUN  ") && header.hasSuffix("  TITLE"),
            "\(header)")
        let rows = Self.table(output)
        try #require(rows.count == 4, "\(output)")
        let shown = rows.map { [$0["ID"], $0["KIND"], $0["DRY RUN"], $0["TITLE"]] }
        #expect(
            shown == [
                [clipped, "campaign", "-", "Very long title Very long tit…"],
                [untitled, "single", "-", "-"],
                [dryRun, "single", "yes", "Welcome back"],
                [campaign, "campaign", "-", "Daily digest"],
            ], "\(output)")
        #expect(output.split(separator: "\n").count == 5, "a title's line break breaks the table: \(output)")

        let detail = try await run(["job", dryRun], env)
        #expect(detail.contains("queued (dry run)") && detail.contains("\nsingle, title: Welcome back\n"), "\(detail)")
        #expect(try await run(["job", untitled], env).contains("\nsingle, title: -\n"))
        #expect(try await run(["job", campaign], env).contains("\ncampaign, title: Daily digest\n"))
    }

    /// A title is someone else's text: it reaches the operator's terminal as one line of what it
    /// holds, never as escape sequences, extra lines or reordered text.
    @Test func aTitlesControlCharactersNeverReachTheTerminal() async throws {
        let (_, env) = try await setUp()
        let title = "Sale\u{1B}[31m red\r\nfake: line\u{202E}txet \u{05E9}\u{200F}!"
        let job = try await run(["send", "--user", "1", "--app", "wowa", "--title", title], env)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        // A right-to-left mark, as Hebrew text holds, is kept.
        let shown = "Sale\u{FFFD}[31m red  fake: line\u{FFFD}txet \u{05E9}\u{200F}!"
        let detail = try await run(["job", job], env)
        #expect(detail.contains("\nsingle, title: \(shown)\n"), "\(detail)")
        #expect(detail.split(separator: "\n").count == 4, "\(detail)")
        let listing = try await run(["jobs"], env)
        #expect(!listing.unicodeScalars.contains { $0 == "\u{1B}" || $0 == "\r" || $0 == "\u{202E}" }, "\(listing)")
        #expect(listing.split(separator: "\n").count == 2, "\(listing)")
    }
}
