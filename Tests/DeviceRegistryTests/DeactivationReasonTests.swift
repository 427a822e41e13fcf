import DeviceRegistry
import PostgresNIO
import Testing
import TestSupport

/// `push_devices.deactivation_reason` read as ``DeactivationReason``. No CHECK bounds the column:
/// the SQL functions write reasons of their own, and each of them must be a case, or reading
/// such a device would fail.
@Suite struct DeactivationReasonTests {
    @Test func everyReasonTheSQLFunctionsWriteIsACase() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            var written: Set<String> = []
            for try await reason in try await client.query("""
                SELECT DISTINCT unnest(regexp_matches(prosrc, 'deactivation_reason\\s*=[^;]*?''(\\w+)''', 'g'))
                  FROM pg_proc WHERE pronamespace = 'public'::regnamespace
                """).decode(String.self) {
                written.insert(reason)
            }
            #expect(written == ["account_switch", "device_limit", "replaced"])
            #expect(written.isSubset(of: DeactivationReason.allCases.map(\.rawValue)))
            try await expectRoundTrips(DeactivationReason.self, client)
        }
    }

    /// Messages and logs spell a reason as the database does, not as the Swift case.
    @Test func aReasonIsInterpolatedAsTheDatabaseSpellsIt() {
        #expect("\(DeactivationReason.accountSwitch)" == "account_switch")
        #expect("\(DeactivationReason.senderIDMismatch)" == "sender_id_mismatch")
    }
}
