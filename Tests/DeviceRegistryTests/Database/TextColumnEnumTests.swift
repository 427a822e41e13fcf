import DeviceRegistry
import PostgresNIO
import TestSupport
import Testing

@Suite struct TextColumnEnumTests {
    /// Bound one by one or as an array, a case travels as its text.
    @Test func casesBindAsTextAndArraysAsTextArrays() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let statuses: [DeliveryStatus] = [.sent, .skipped]
            let query: PostgresQuery = "SELECT \(DeliveryStatus.pending) || ',' || array_to_string(\(statuses)::text[], ',')"
            for try await text in try await client.query(query).decode(String.self) {
                #expect(text == "pending,sent,skipped")
            }
        }
    }

    @Test func messagesSpellTheChoicesAsTheDatabaseDoes() {
        #expect(Platform.choiceList == "ios, android, web")
        #expect(DeactivationReason.choiceList.hasPrefix("account_switch, replaced, device_limit"))
    }
}
