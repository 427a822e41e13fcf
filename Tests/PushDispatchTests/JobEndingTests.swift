import DeviceRegistry
import FCMEmulator
import Foundation
import Logging
import PostgresNIO
import TestSupport
import Testing

@testable import PushDispatch

/// How jobs end when several workers share one queue: every ending is final, written with the
/// results that caused it, logged by the one worker that ended it, and the job's counts add up
/// to its audience. Each case runs several jobs in a row on the same workers, to meet the race
/// where one worker completed a job between another's failed results and its failure.
@Suite("Job endings with several workers on one queue")
struct JobEndingTests {
    enum Ending: String, CaseIterable, CustomTestStringConvertible, Sendable {
        case completed, failedByCredentials, failedByPayload, failedByProject, cancelledMidFlight
        var testDescription: String { rawValue }
    }

    static let audience = 240
    static let jobsPerCase = 3

    @Test(arguments: Ending.allCases, [2, 3])
    func everyEndingIsFinalAndAddsUp(ending: Ending, workers: Int) async throws {
        try await WorkerFixture.with { fixture in
            let log = CapturedLog()
            let appCode = try await Self.prepare(ending, fixture)
            // Answers take a few milliseconds, so that every worker holds part of each job; a job
            // to cancel mid-flight about a second and a half, which a cancel on a busy machine
            // still reaches.
            fixture.emulator.script(tokenPrefix: "end-", .slow(.milliseconds(ending == .cancelledMidFlight ? 150 : 5)))
            try await Self.withWorkers(workers, fixture, log: log) {
                for round in 1...Self.jobsPerCase {
                    let emulator = fixture.emulator
                    let job = try await fixture.sql { client in
                        let jobs = JobDirectory(client: client, logger: workerLogger)
                        let start = emulator.stats.accepted
                        let job = try await jobs.enqueue(
                            appCode: appCode, userIDs: nil, platforms: nil, message: Self.message(for: ending), idempotencyKey: nil,
                            sendAt: nil, dryRun: false
                        ).id
                        if ending == .cancelledMidFlight {
                            // Cancelled on the connection that queued it: a new one's setup could
                            // outlast the job's sends on a loaded machine.
                            while emulator.stats.accepted < start + 20 { try await Task.sleep(for: .milliseconds(5)) }
                            #expect(try await jobs.cancel(job) == .cancelled)
                        }
                        return job
                    }
                    let end = try await fixture.finished(job)
                    #expect(end.status == ending.status.rawValue, "round \(round): \(end.error ?? "")")
                    if let expected = ending.reason(appCode: appCode) {
                        #expect(end.error?.hasPrefix(expected) == true, "round \(round): \(end.error ?? "no error")")
                    }
                    let summary = try await Self.settled(job, fixture)
                    #expect(summary.status == ending.status, "round \(round): the ending was replaced")
                    #expect(summary.sent + summary.failed + summary.skipped == summary.audience, "round \(round): \(summary)")
                    switch ending {
                    case .completed: #expect(summary.sent == Self.audience)
                    case .failedByCredentials, .failedByPayload, .failedByProject:
                        // The audience not expanded when the job failed is never expanded.
                        #expect(summary.failed == summary.audience && summary.sent == 0 && (summary.audience ?? 0) > 0)
                    case .cancelledMidFlight:
                        // What was in flight lands; nothing more is sent (the rest is skipped or never expanded).
                        #expect(summary.sent >= 20 && summary.sent < Self.audience && summary.failed == 0, "round \(round): \(summary)")
                    }
                    let failedLines = log.lines.filter { line in
                        line.contains(" job failed ")
                            && ["\"push.job_id\": \(job),", "\"push.job_id\": \(job)]"].contains { line.contains($0) }
                    }
                    #expect(failedLines.count == (ending.status == .failed ? 1 : 0), "round \(round): \(failedLines)")
                }
            }
        }
    }

    /// A failure another worker's completion (or an operator's cancel) beat is not written over
    /// it, and the write says it ended nothing.
    @Test func aFailureAfterTheJobEndedReplacesNothing() async throws {
        try await WorkerFixture.with { fixture in
            try await fixture.register(["tok-a", "tok-b"])
            let job = try await fixture.enqueue(users: [1, 2])
            let status = try await fixture.withWorker { try await fixture.finished(job).status }
            #expect(status == "completed")
            let ended = try await fixture.sql { client in
                try await DeliveryQueue(client: client, worker: "late", lease: .seconds(5), logger: workerLogger)
                    .write(.init(jobFailures: [(job, "app wowa: too late")]))
            }
            #expect(ended.isEmpty)
            let summary = try await Self.settled(job, fixture)
            #expect(summary.status == .completed && summary.sent == 2 && summary.firstError == nil)
        }
    }

    /// The results and the failure they cause commit together or not at all: a write whose
    /// failure cannot be written leaves no result behind either, and is written whole on retry.
    @Test func resultsAndTheFailureTheyCauseCommitTogether() async throws {
        try await WorkerFixture.with { fixture in
            try await fixture.register(["tok-a", "tok-b"])
            let job = try await fixture.enqueue(users: [1, 2])
            try await fixture.sql { client in
                let queue = DeliveryQueue(client: client, worker: "w", lease: .seconds(5), logger: workerLogger)
                let audience = try #require(try await queue.unexpandedJobs(excludingApps: [], excludingJobs: [], limit: 1).first)
                let claimed = try await queue.expandAndClaim(audience, limit: 10).claimed
                #expect(claimed.count == 2)
                let results = claimed.map {
                    DeliveryQueue.Result(
                        $0, status: .failed, errorCode: .permissionDenied, errorMessage: "denied", messageID: nil,
                        attempted: true, nextAttempt: Date())
                }
                let batch = Outbox.Batch(
                    results: results, jobFailures: [(job, "app wowa: denied")],
                    finishedChunks: Array(Set(claimed.compactMap(\.lease.chunkID))))
                // The job row refuses the update, as a lost connection or a lock timeout would.
                try await client.query(
                    """
                    CREATE FUNCTION refuse_job_update() RETURNS trigger LANGUAGE plpgsql AS $$
                    BEGIN RAISE EXCEPTION 'refused for the test'; END $$
                    """)
                try await client.query("CREATE TRIGGER refuse BEFORE UPDATE ON push_jobs FOR EACH ROW EXECUTE FUNCTION refuse_job_update()")
                await #expect(throws: (any Error).self) { try await queue.write(batch) }
                var summary = try #require(try await JobDirectory(client: client, logger: workerLogger).job(job))
                #expect((summary.status, summary.failed, summary.pending) == (.running, 0, 2))
                try await client.query("DROP TRIGGER refuse ON push_jobs")
                #expect(try await queue.write(batch) == [job])
                summary = try #require(try await JobDirectory(client: client, logger: workerLogger).job(job))
                #expect((summary.status, summary.failed, summary.pending) == (.failed, 2, 0))
            }
        }
    }

    // MARK: Setting up each ending

    /// The app (and its devices) whose jobs end as `ending` says; returns its code.
    private static func prepare(_ ending: Ending, _ fixture: WorkerFixture) async throws -> String {
        let appID: Int64
        let code: String
        switch ending {
        case .completed, .failedByPayload, .cancelledMidFlight:
            (appID, code) = (fixture.appID, "wowa")
        case .failedByCredentials:
            // A key the token endpoint has never seen.
            let rogue = try ServiceAccountFixture.generate(projectID: "rogue-project")
            code = "rogue"
            appID = try await fixture.sql {
                try await addApp(
                    $0, code: code, projectID: rogue.projectID, clientEmail: fixture.account.clientEmail,
                    privateKeyPEM: rogue.privateKeyPEM, privateKeyID: nil)
            }
        case .failedByProject:
            // Credentials the token endpoint accepts, for a project they may not send to.
            code = "elsewhere"
            appID = try await fixture.sql {
                try await addApp(
                    $0, code: code, projectID: "someone-elses-project", clientEmail: fixture.account.clientEmail,
                    privateKeyPEM: fixture.account.privateKeyPEM, privateKeyID: fixture.account.privateKeyID)
            }
        }
        _ = try await fixture.sql { client in
            try await client.query(
                """
                INSERT INTO push_devices (user_id, app_id, token, platform)
                SELECT g, \(appID), 'end-' || \(code) || '-' || g, 'android' FROM generate_series(1, \(audience)) g
                """)
        }
        return code
    }

    private static func message(for ending: Ending) -> String {
        // Valid as far as push_check_message sees (it leaves the android block's field names to FCM),
        // refused by FCM for every device.
        ending == .failedByPayload ? #"{"notification":{"title":"Hi"},"android":{"colour":"red"}}"# : #"{"notification":{"title":"Hi"}}"#
    }

    /// The job's summary once nothing of it is pending (in-flight sends are recorded after an ending).
    private static func settled(_ job: Int64, _ fixture: WorkerFixture) async throws -> JobSummary {
        let deadline = ContinuousClock.now + .seconds(20)
        while true {
            let summary = try #require(try await fixture.sql { try await JobDirectory(client: $0, logger: workerLogger).job(job) })
            if summary.pending == 0 || ContinuousClock.now > deadline { return summary }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// `count` workers on the fixture's queue, each with its own name and a small concurrency,
    /// logging to `log`; stopped gracefully after `body`.
    private static func withWorkers(
        _ count: Int, _ fixture: WorkerFixture, log: CapturedLog,
        _ body: @Sendable () async throws -> Void
    ) async throws {
        let workers = (1...count).map { index in
            var configuration = fixture.configuration
            configuration.workerName = "ending-worker-\(index)"
            configuration.concurrency = 16
            // A key the token endpoint has never seen fails its jobs at once.
            configuration.newKeyGrace = .zero
            return WorkerService(configuration: configuration, logger: log.logger(level: .notice))
        }
        try await fixture.withWorkers(workers, body)
    }
}

extension JobEndingTests.Ending {
    var status: JobStatus {
        switch self {
        case .completed: .completed
        case .failedByCredentials, .failedByPayload, .failedByProject: .failed
        case .cancelledMidFlight: .cancelled
        }
    }

    func reason(appCode: String) -> String? {
        switch self {
        case .completed, .cancelledMidFlight: nil
        case .failedByCredentials: "app \(appCode): token endpoint refused the credentials"
        case .failedByPayload: "app \(appCode): FCM refused the message"
        case .failedByProject: "app \(appCode): the service account may not send for this project (PERMISSION_DENIED)"
        }
    }
}
