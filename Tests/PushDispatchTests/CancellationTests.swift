import DeviceRegistry
import FCMEmulator
import Foundation
import PostgresNIO
import PushDispatch
import Testing
import TestSupport

@Suite("Cancelling a running job")
struct CancellationTests {
    @Test func cancelWhileRunningStopsSendingAndKeepsWhatWasSent() async throws {
        try await WorkerFixture.with { fixture in
            fixture.emulator.script(tokenPrefix: "cancel-dev-", .slow(.milliseconds(200)))
            _ = try await fixture.sql { client in
                try await client.query(
                    "INSERT INTO push_devices (user_id, app_id, token, platform) SELECT g, \(fixture.appID), 'cancel-dev-' || g, 'ios' FROM generate_series(1, 300) g")
            }
            let job = try await fixture.campaign()
            var configuration = fixture.configuration
            configuration.concurrency = 10
            let (acceptedAtCancel, acceptedLater) = try await fixture.withWorker(configuration) { () async throws -> (Int, Int) in
                while fixture.emulator.stats.accepted < 20 { try await Task.sleep(for: .milliseconds(20)) }
                let result = try await fixture.sql { try await JobDirectory(client: $0, logger: workerLogger).cancel(job) }
                #expect(result == .cancelled)
                let atCancel = fixture.emulator.stats.accepted
                try await Task.sleep(for: .seconds(1.5))
                return (atCancel, fixture.emulator.stats.accepted)
            }
            // At most what was in flight at the moment of the cancel lands afterwards.
            #expect(acceptedLater - acceptedAtCancel <= configuration.concurrency)
            #expect(acceptedLater < 100)
            let rows = try await fixture.deliveries(job)
            let sent = rows.values.filter { $0.status == "sent" }.count
            #expect(sent == acceptedLater, "every accepted send is logged as sent")
            #expect(rows.values.allSatisfy { $0.status != "pending" })
            #expect(try await fixture.finished(job, within: .seconds(1)).status == "cancelled")
        }
    }
}
