import Foundation
import PostgresNIO
import TestSupport
import Testing

@testable import PushDispatch

/// push-worker against nginx: an HTTP/2 server we did not write, with its own framing habits,
/// standing in for FCM with a canned 200. The OAuth token endpoint stays the emulator's, so
/// PUSH_CA_FILE holds both CAs.
///
/// nginx's `return 200` answers once a request's HEADERS are in, before it has read the body,
/// then ends the stream with RST_STREAM(NO_ERROR): RFC 9113 §8.1 says a client MUST NOT
/// discard such a complete response. Every device must be sent once, with one attempt.
@Suite("push-worker against nginx's HTTP/2")
struct NginxEndpointTests {
    /// 512 in flight while nginx allows 128 streams a connection (and GOAWAYs a connection
    /// after 1,000 requests): the worker needs several connections.
    @Test func aCampaignIsSentOnceToEveryDeviceWhenNginxAnswersBeforeReadingTheBody() async throws {
        try await Self.sendCampaign(
            devices: 2_000, concurrency: 512, nginx: .init(errorLogLevel: "debug"),
            resets: .init(required: [Self.noError], allowed: [Self.noError]))
    }

    /// Eight streams a connection, 64 in flight: most streams wait in the client for room. Until
    /// a new connection has nginx's SETTINGS, the client allows itself 100 streams there, and
    /// nginx refuses those beyond 8 with RST_STREAM(REFUSED_STREAM): sent again, they are
    /// neither attempts nor duplicates.
    @Test func aCampaignIsSentOnceToEveryDeviceWithEightStreamsAConnection() async throws {
        try await Self.sendCampaign(
            devices: 2_000, concurrency: 64, nginx: .init(maxConcurrentStreams: 8, errorLogLevel: "debug"),
            resets: .init(required: [Self.noError], allowed: [Self.noError, Self.refusedStream]))
    }

    /// The same campaign where nginx reads every body before it answers (through a proxy), so
    /// no stream ends with RST_STREAM: what the two tests above differ from.
    @Test func aCampaignIsSentOnceToEveryDeviceWhenNginxReadsTheBodyFirst() async throws {
        try await Self.sendCampaign(
            devices: 2_000, concurrency: 512, nginx: .init(readsRequestBodyFirst: true, errorLogLevel: "debug"),
            resets: .init(required: [], allowed: []))
    }

    /// FCM's answers are JSON, and JSON can carry `\u0000`, a character PostgreSQL's text
    /// refuses: here nginx refuses every send with one in the error's message and status. Each
    /// delivery is recorded failed with the NUL written as U+FFFD, and the job fails with the
    /// message as its reason. (Before, the write of those results was refused and tried again
    /// for good, and the worker recorded nothing more.)
    @Test func anAnswerCarryingANulCharacterIsRecorded() async throws {
        try await WorkerFixture.with { fixture in
            let refusal = #"{"error":{"code":400,"message":"refused\u0000here","status":"INVALID\u0000ARGUMENT"}}"#
            try await NginxServer.withRunning(.init(answer: (400, refusal))) { nginx in
                _ = try await fixture.sql { client in
                    try await client.query(
                        """
                        INSERT INTO push_devices (user_id, app_id, token, platform)
                        SELECT g, \(fixture.appID), 'tok-nul-' || g, 'android' FROM generate_series(1, 20) g
                        """)
                }
                var configuration = fixture.configuration
                configuration.fcmBaseURL = nginx.baseURL
                configuration.caFile = try nginx.caFile(alsoTrusting: fixture.emulator.caFilePath)
                let job = try await fixture.campaign()
                let (status, _) = try await fixture.withWorker(configuration) {
                    try await Self.finished(job, fixture, within: .seconds(60))
                }
                let rows = try await fixture.deliveries(job)
                #expect(status == "failed")
                #expect(rows.count == 20 && rows.values.allSatisfy { $0.status == "failed" })
                let answered = rows.values.filter { $0.attempts == 1 }
                #expect(!answered.isEmpty)
                #expect(answered.allSatisfy { $0.errorCode == "INVALID\u{FFFD}ARGUMENT" && $0.errorMessage == "refused\u{FFFD}here" })
                let reason = try await fixture.sql { client in
                    try await client.query("SELECT last_error FROM push_jobs WHERE id = \(job)").collect().first?.decode(String.self)
                }
                #expect(reason?.contains("refused\u{FFFD}here") == true, "\(reason ?? "no reason")")
            }
        }
    }

    /// One app's sends are answered with 1 MiB each (a proxy's page, say), beyond the 256 KiB
    /// the worker reads: it keeps the status, resets the stream, and NIOHTTP2 drops the DATA
    /// still on its way. That DATA used the connection's receive window all the same, and the
    /// window must come back: another app's campaign shares the connection (8 in flight, one
    /// connection), and its answers must keep coming on it. Before, the dropped DATA's window
    /// was lost: each such answer retired its connection, and the streams still on it could
    /// wait for their deadline and be sent again.
    @Test func oversizedAnswersLeaveTheConnectionsOtherAnswersFlowing() async throws {
        try await WorkerFixture.with { fixture in
            let huge = try await fixture.addOtherApp(code: "huge")
            let devices = 300
            let hugeDevices = 4
            try await NginxServer.withRunning(.init(oversizedAnswers: ["huge-project": 1024 * 1024])) { nginx in
                _ = try await fixture.sql { client in
                    try await client.query(
                        """
                        INSERT INTO push_devices (user_id, app_id, token, platform)
                        SELECT g, \(fixture.appID), 'tok-beside-' || g, 'android' FROM generate_series(1, \(devices)) g
                        UNION ALL
                        SELECT g, \(huge), 'tok-huge-' || g, 'android' FROM generate_series(1, \(hugeDevices)) g
                        """)
                }
                var configuration = fixture.configuration
                configuration.fcmBaseURL = nginx.baseURL
                configuration.caFile = try nginx.caFile(alsoTrusting: fixture.emulator.caFilePath)
                configuration.concurrency = 8
                configuration.fcmRequestTimeout = .seconds(5)
                let beside = try await fixture.campaign()
                let oversized = try await fixture.sql { client in
                    for try await id in try await client.query(
                        #"SELECT push_enqueue_campaign(app_code => 'huge', message => '{"notification":{"title":"All"}}')"#
                    ).decode(Int64.self) {
                        return id
                    }
                    throw CancellationError()
                }
                let (besideEnd, hugeEnd) = try await fixture.withWorker(configuration) {
                    (try await Self.finished(beside, fixture), try await Self.finished(oversized, fixture))
                }
                await nginx.stop()

                let rows = try await fixture.deliveries(beside)
                let hugeRows = try await fixture.deliveries(oversized)
                let logged = try nginx.loggedRequests()
                let summary =
                    Self.summary(rows, retried: besideEnd.retried, logged: logged)
                    + " | oversized: \(hugeRows.count) deliveries, failed attempts: \(hugeEnd.retried)"
                #expect(besideEnd.status == "completed" && hugeEnd.status == "completed", "\(summary)")
                #expect(rows.count == devices && rows.values.allSatisfy { $0.status == "sent" && $0.attempts == 1 }, "\(summary)")
                #expect(hugeRows.count == hugeDevices && hugeRows.values.allSatisfy { $0.attempts == 1 }, "\(summary)")
                // Each send reached nginx once, all on the one connection.
                #expect(
                    logged.filter { $0.path == "/v1/projects/\(fixture.account.projectID)/messages:send" }.count == devices, "\(summary)")
                #expect(logged.filter { $0.path == "/oversized/huge-project.json" }.count == hugeDevices, "\(summary)")
                #expect(Set(logged.map(\.connection)).count == 1, "\(summary)")
            }
        }
    }

    static let noError = 0, refusedStream = 7

    /// The RST_STREAM error codes nginx must send (at least once each) and may send, read in its
    /// debug log: the test is known to exercise what it says.
    struct ExpectedResets {
        let required: Set<Int>
        let allowed: Set<Int>
    }

    private static func sendCampaign(
        devices: Int, concurrency: Int, nginx options: NginxServer.Options,
        resets expected: ExpectedResets
    ) async throws {
        try await WorkerFixture.with { fixture in
            try await NginxServer.withRunning(options) { nginx in
                _ = try await fixture.sql { client in
                    try await client.query(
                        """
                        INSERT INTO push_devices (user_id, app_id, token, platform)
                        SELECT g, \(fixture.appID), 'tok-nginx-' || g, 'android' FROM generate_series(1, \(devices)) g
                        """)
                }
                var configuration = fixture.configuration
                configuration.fcmBaseURL = nginx.baseURL
                configuration.caFile = try nginx.caFile(alsoTrusting: fixture.emulator.caFilePath)
                configuration.concurrency = concurrency
                let job = try await fixture.campaign()
                let (status, retried) = try await fixture.withWorker(configuration) { try await Self.finished(job, fixture) }
                // A request is logged once answered: stopped, nginx has logged them all.
                await nginx.stop()

                let rows = try await fixture.deliveries(job)
                let logged = try nginx.loggedRequests()
                let answered = try nginx.answeredSends()
                let frames = try nginx.sentControlFrames()
                let summary =
                    Self.summary(rows, retried: retried, logged: logged)
                    + "; it sent RST_STREAM by code \(frames.resets) and \(frames.goAways) GOAWAY"
                #expect(status == "completed", "\(summary)")
                #expect(rows.count == devices, "\(summary)")
                #expect(rows.values.allSatisfy { $0.status == "sent" && $0.attempts == 1 && $0.messageID == "0:1" }, "\(summary)")
                // Once each: no device's request reached nginx twice, and nothing else did.
                #expect(answered.count == devices, "\(summary)")
                #expect(logged.count == devices, "\(summary)")
                #expect(Set(answered.map(\.path)) == ["/v1/projects/\(fixture.account.projectID)/messages:send"])
                #expect(Set(answered.map(\.connection)).count >= 2, "\(summary)")
                #expect(answered.allSatisfy { $0.protocol == "HTTP/2.0" })
                #expect(expected.required.isSubset(of: frames.resets.keys), "RST_STREAM sent by code: \(frames.resets)")
                #expect(Set(frames.resets.keys).isSubset(of: expected.allowed), "RST_STREAM sent by code: \(frames.resets)")
            }
        }
    }

    /// Waits for the job to end, watching its retries: a delivery waiting for another attempt is
    /// pending with the error of the last one, which its row loses once it is sent. Returns the
    /// job's status and how many failed attempts each error message ended.
    private static func finished(_ job: Int64, _ fixture: WorkerFixture, within limit: Duration = .seconds(180)) async throws
        -> (status: String, retried: [String: Int])
    {
        try await fixture.sql { client in
            var failedAttempts: [String: String] = [:]  // "device/attempts" → its error
            func retried() -> [String: Int] { Dictionary(grouping: failedAttempts.values, by: { $0 }).mapValues(\.count) }
            let deadline = ContinuousClock.now + limit
            while ContinuousClock.now < deadline {
                for try await row in try await client.query(
                    """
                    SELECT device_id, attempts, coalesce(error_code, '-') || ': ' || coalesce(error_message, '')
                      FROM push_deliveries WHERE job_id = \(job) AND status = 'pending' AND attempts > 0
                    """
                ).decode((Int64, Int, String).self) {
                    failedAttempts["\(row.0)/\(row.1)"] = row.2
                }
                for try await status in try await client.query("SELECT status FROM push_jobs WHERE id = \(job)").decode(String.self)
                where ["completed", "failed", "cancelled"].contains(status) {
                    return (status, retried())
                }
                try await Task.sleep(for: .milliseconds(50))
            }
            return ("timeout", retried())
        }
    }

    /// What the worker recorded, by outcome, the failed attempts seen on the way, and what nginx
    /// saw: the assertions' context.
    private static func summary(_ rows: [String: WorkerFixture.Delivery], retried: [String: Int], logged: [NginxServer.LoggedRequest])
        -> String
    {
        var outcomes: [String: Int] = [:]
        for row in rows.values {
            outcomes[
                "\(row.status) after \(row.attempts) attempt(s)" + (row.errorCode.map { ": \($0) \(row.errorMessage ?? "")" } ?? ""),
                default: 0] += 1
        }
        let statuses = Dictionary(grouping: logged, by: \.status).mapValues(\.count)
        func list(_ counts: [String: Int]) -> String {
            counts.sorted { $0.value > $1.value }.map { "\($0.value) × \($0.key)" }.joined(separator: "; ")
        }
        return "deliveries: \(list(outcomes)) | failed attempts seen: \(retried.isEmpty ? "none" : list(retried))"
            + " | nginx logged \(logged.count) requests on \(Set(logged.map(\.connection)).count) connections, by status \(statuses)"
    }
}
