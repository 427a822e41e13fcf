import DeviceRegistry
import Foundation
import PostgresNIO
import TestSupport
import Testing
import WireFormats

@Suite("DeliveryLog: the audit log, newest first, by keyset")
struct DeliveryLogTests {
    func withScenario(_ body: @Sendable (DeliveryLog, AuditScenario, PostgresClient) async throws -> Void) async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            try await body(DeliveryLog(client: client, logger: testLogger), try await AuditScenario.seed(client), client)
        }
    }

    @Test func everyFilterSelectsItsRowsNewestFirst() async throws {
        try await withScenario { log, scenario, _ in
            for query in AuditScenario.queries {
                var streamed: [Int64] = []
                try await log.each(query.filter(scenario)) { streamed.append($0.id) }
                #expect(streamed == query.expectedIDs(scenario), "\(query)")
                let page = try await log.page(query.filter(scenario), below: nil, limit: 100)
                #expect(page.deliveries.map(\.id) == query.expectedIDs(scenario) && page.nextCursor == nil, "\(query)")
            }
        }
    }

    @Test func recordsCarryTheWorkersColumnsAndAMaskedToken() async throws {
        try await withScenario { log, scenario, _ in
            let records = try await log.page(DeliveryFilter(jobID: scenario.jobs[0]), below: nil, limit: 10).deliveries
            try #require(records.count == 2)
            let (failed, sent) = (records[0], records[1])
            #expect(
                failed.status == .failed && failed.errorCode == AuditScenario.failure.code
                    && failed.errorMessage == AuditScenario.failure.message && failed.attempts == 2 && failed.fcmMessageID == nil)
            #expect(failed.userID == 2 && failed.appCode == "wowa" && failed.platform == .android && failed.deviceID == scenario.devices[1])
            #expect(failed.maskedToken == AuditScenario.masked(1) && failed.maskedToken == "wowa-user2-android-t…")
            #expect(sent.fcmMessageID == "projects/wowa/messages/0:1" && sent.errorCode == nil && sent.jobID == scenario.jobs[0])
            #expect(sent.updatedAt == ISO8601Time.parse("2020-06-01T00:00:00Z") && sent.createdAt > sent.updatedAt)
        }
    }

    /// A dry run's deliveries say so, in pages and in a device's newest: `sent` is FCM's check.
    @Test func aDryRunsDeliveriesSaySo() async throws {
        try await withScenario { log, scenario, client in
            let all = try await log.page(DeliveryFilter(), below: nil, limit: 100).deliveries
            #expect(!all.isEmpty && !all.contains { $0.dryRun })
            try await client.query("UPDATE push_jobs SET validate_only = true WHERE id = \(scenario.jobs[0])")
            let marked = try await log.page(DeliveryFilter(), below: nil, limit: 100).deliveries
            #expect(marked.filter(\.dryRun).map(\.id) == marked.filter { $0.jobID == scenario.jobs[0] }.map(\.id))
            let device = try #require(marked.first { $0.jobID == scenario.jobs[0] }?.deviceID)
            let newest = try await log.newest(ofDevices: [device], each: 10)[device] ?? []
            #expect(!newest.isEmpty && newest.allSatisfy { $0.dryRun == ($0.jobID == scenario.jobs[0]) })
            let dryRun = try #require(marked.first { $0.dryRun })
            #expect(DeliveryCSV.line(dryRun).hasSuffix(",true"))
        }
    }

    @Test func pagesChainByCursorAndTheLastPageHasNone() async throws {
        try await withScenario { log, scenario, _ in
            let ids = scenario.deliveries
            // 5 rows by 2: [4,3] [2,1] [0].
            let first = try await log.page(DeliveryFilter(), below: nil, limit: 2)
            #expect(first.deliveries.map(\.id) == [ids[4], ids[3]] && first.nextCursor == ids[3])
            let second = try await log.page(DeliveryFilter(), below: first.nextCursor, limit: 2)
            #expect(second.deliveries.map(\.id) == [ids[2], ids[1]] && second.nextCursor == ids[1])
            let last = try await log.page(DeliveryFilter(), below: second.nextCursor, limit: 2)
            #expect(last.deliveries.map(\.id) == [ids[0]] && last.nextCursor == nil)
            // Exactly `limit` rows left: no cursor to an empty page.
            let exact = try await log.page(DeliveryFilter(), below: nil, limit: 5)
            #expect(exact.deliveries.count == 5 && exact.nextCursor == nil)
            let exactTail = try await log.page(DeliveryFilter(), below: ids[2], limit: 2)
            #expect(exactTail.deliveries.map(\.id) == [ids[1], ids[0]] && exactTail.nextCursor == nil)
            let oneShort = try await log.page(DeliveryFilter(), below: nil, limit: 4)
            #expect(oneShort.deliveries.count == 4 && oneShort.nextCursor == ids[1])
            // The cursor combines with a filter: user 1 is [3,2,0].
            let filtered = try await log.page(DeliveryFilter(userID: 1), below: ids[3], limit: 1)
            #expect(filtered.deliveries.map(\.id) == [ids[2]] && filtered.nextCursor == ids[2])
            let beyond = try await log.page(DeliveryFilter(), below: ids[0], limit: 10)
            #expect(beyond.deliveries.isEmpty && beyond.nextCursor == nil)
        }
    }

    @Test func eachHonoursLimitAndCursorAndStopsOnTheCallersError() async throws {
        struct Stop: Error {}
        try await withScenario { log, scenario, _ in
            var seen: [Int64] = []
            try await log.each(DeliveryFilter(), below: scenario.deliveries[4], limit: 2) { seen.append($0.id) }
            #expect(seen == [scenario.deliveries[3], scenario.deliveries[2]])
            seen = []
            await #expect(throws: Stop.self) {
                try await log.each(DeliveryFilter()) {
                    seen.append($0.id)
                    if seen.count == 2 { throw Stop() }
                }
            }
            #expect(seen.count == 2)
        }
    }
}
