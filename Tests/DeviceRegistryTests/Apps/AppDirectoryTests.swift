import DeviceRegistry
import Foundation
import PostgresNIO
import TestSupport
import Testing

@Suite("AppDirectory: the per-app send rate cap")
struct AppSendRateTests {
    @Test func aNewAppIsUnlimitedAndTheCapCanBeSetChangedAndLifted() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            _ = try await addApp(client)
            _ = try await addApp(client, code: "beta")
            let apps = AppDirectory(client: client, logger: testLogger)
            #expect(try await apps.app(code: "wowa")?.maxSendsPerSecond == nil)
            #expect(try await apps.setRate(code: "wowa", perSecond: 500).maxSendsPerSecond == 500)
            #expect(try await apps.setRate(code: "wowa", perSecond: 20).maxSendsPerSecond == 20)
            #expect(try await apps.list().map(\.maxSendsPerSecond) == [nil, 20])
            #expect(try await count(client, "SELECT max_sends_per_second FROM apps WHERE code = 'wowa'") == 20)
            #expect(try await apps.setRate(code: "wowa", perSecond: nil).maxSendsPerSecond == nil)
            #expect(try await count(client, "SELECT count(*)::int FROM apps WHERE max_sends_per_second IS NULL") == 2)
        }
    }

    @Test func aRateThatIsNotPositiveOrAnUnknownAppIsRefusedChangingNothing() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            _ = try await addApp(client)
            let apps = AppDirectory(client: client, logger: testLogger)
            _ = try await apps.setRate(code: "wowa", perSecond: 100)
            for rate in [0, -5, Int(Int32.max) + 1] {
                await #expect(throws: AppDirectoryError.invalidRate(rate)) { try await apps.setRate(code: "wowa", perSecond: rate) }
            }
            #expect(AppDirectoryError.invalidRate(-5).description == "the send rate must be 1 to 2147483647 sends per second, not -5")
            await #expect(throws: AppDirectoryError.unknownCode("nope")) { try await apps.setRate(code: "nope", perSecond: 10) }
            await #expect(throws: AppDirectoryError.unknownCode("nope")) { try await apps.setRate(code: "nope", perSecond: nil) }
            #expect(try await count(client, "SELECT max_sends_per_second FROM apps WHERE code = 'wowa'") == 100)
            // The table refuses it too, for SQL callers.
            await #expect { try await client.query("UPDATE apps SET max_sends_per_second = 0") } throws: { error in
                DatabaseErrorText.describe(error).hasPrefix("app wowa: max_sends_per_second is a positive number of sends per second")
            }
        }
    }
}
