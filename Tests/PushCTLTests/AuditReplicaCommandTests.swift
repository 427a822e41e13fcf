import Foundation
import TestSupport
import Testing

/// pushctl's audit commands (jobs, job, deliveries, devices) with DATABASE_READ_URL on a
/// streaming standby: they read it and say on stderr how far behind it is; stdout stays the
/// listing. Writes (send) stay on DATABASE_URL.
@Suite("pushctl audit on a streaming standby", .timeLimit(.minutes(3)))
struct AuditReplicaCommandTests {
    let pushctl = BuiltProduct("pushctl")

    @Test func auditCommandsReadTheStandbyAndShowItsLag() async throws {
        try await ReplicatedDatabase.with { database in
            let primary = ["DATABASE_URL": database.primaryURL]
            let replicated = primary.merging(["DATABASE_READ_URL": database.standbyURL]) { $1 }

            // Caught up once the standby has replayed what the primary wrote meanwhile.
            let idle = try await until { () -> BuiltProduct.Result? in
                let listing = try await pushctl.run(["jobs"], environment: replicated)
                return listing.stderr.hasSuffix("no lag\n") ? listing : nil
            }
            #expect(idle.status == 0 && idle.stderr == "pushctl: read from the standby (DATABASE_READ_URL): no lag\n", "\(idle.stderr)")

            try await database.pauseReplay()
            let sent = try await pushctl.run(["send", "--app", "wowa", "--user", "1", "--title", "Replicated"], environment: replicated)
            #expect(sent.status == 0, "\(sent.stderr)")
            let job = sent.stdout.trimmingCharacters(in: .whitespacesAndNewlines)

            // Read from the standby, which has not applied the job yet; the primary has it.
            let behind = try await until { () -> BuiltProduct.Result? in
                let listing = try await pushctl.run(["jobs"], environment: replicated)
                return listing.stderr.contains(" s behind") ? listing : nil
            }
            #expect(behind.status == 0 && !behind.stdout.contains(job), "\(behind.stdout)")
            let onPrimary = try await pushctl.run(["jobs"], environment: primary)
            #expect(onPrimary.stdout.contains(job) && onPrimary.stderr.isEmpty, "\(onPrimary.stdout)\(onPrimary.stderr)")
            let missing = try await pushctl.run(["job", job], environment: replicated)
            #expect(missing.status != 0 && missing.stderr.contains("no job \(job) on the standby (DATABASE_READ_URL)"), "\(missing.stderr)")
            let audit = try await pushctl.run(["deliveries", "--job", job, "--format", "json"], environment: replicated)
            #expect(audit.status == 0 && audit.stdout == "[]\n", "\(audit.stdout)")
            #expect(audit.stderr.hasPrefix("pushctl: read from the standby (DATABASE_READ_URL): ") && audit.stderr.contains(" s behind"))

            try await database.resumeReplay()
            // Caught up within 20 s (`until` fails the test otherwise). The lag is read before
            // the listing: a run may list the job and still find a moment's replay left
            // (autovacuum, a standby snapshot).
            let caughtUp = try await until { () -> BuiltProduct.Result? in
                let listing = try await pushctl.run(["jobs"], environment: replicated)
                return listing.stdout.contains(job) && listing.stderr.hasSuffix("no lag\n") ? listing : nil
            }
            #expect(caughtUp.status == 0, "\(caughtUp.stderr)")
            let shown = try await pushctl.run(["job", job, "--database-read-url", database.standbyURL], environment: primary)
            #expect(shown.status == 0 && shown.stdout.hasPrefix("job \(job) (app wowa)"), "\(shown.stdout)\(shown.stderr)")
            let devices = try await pushctl.run(["devices", "--app", "wowa"], environment: replicated)
            #expect(devices.status == 0 && devices.stdout == "wowa has no devices\n", "\(devices.stdout)\(devices.stderr)")
        }
    }

    @Test func anUnusableReadURLIsNamed() async throws {
        let result = try await pushctl.run(
            ["jobs"], environment: ["DATABASE_URL": "postgres://u@127.0.0.1:1/db", "DATABASE_READ_URL": "mysql://u@standby/db"])
        #expect(result.status != 0)
        #expect(result.stderr == "pushctl: DATABASE_READ_URL: expected postgres://user:password@host:port/database\n", "\(result.stderr)")
    }

    /// `body`'s answer once it has one, within 20 s.
    func until<T>(_ body: () async throws -> T?) async throws -> T {
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            if let value = try await body() { return value }
            try await Task.sleep(for: .milliseconds(200))
        }
        Issue.record("no answer within 20 s")
        throw CancellationError()
    }
}
