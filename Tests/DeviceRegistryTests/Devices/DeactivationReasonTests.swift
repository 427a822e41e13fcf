import DeviceRegistry
import PostgresNIO
import TestSupport
import Testing

/// `push_devices.deactivation_reason` read as ``DeactivationReason``: the cases are what the
/// schema allows (sql/013), and every reason the SQL functions write themselves is one of them.
@Suite struct DeactivationReasonTests {
    @Test func theCasesAreWhatTheSchemaAllowsAndWhatTheFunctionsWrite() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let allowed = try await allowedValues(client, constraint: "push_devices_deactivation_reason_check")
            #expect(allowed == Set(DeactivationReason.allCases.map(\.rawValue)))
            var written: Set<String> = []
            for try await reason in try await client.query(
                """
                SELECT DISTINCT unnest(regexp_matches(prosrc, 'deactivation_reason\\s*=[^;]*?''(\\w+)''', 'g'))
                  FROM pg_proc WHERE pronamespace = 'public'::regnamespace
                """
            ).decode(String.self) {
                written.insert(reason)
            }
            #expect(written == ["account_switch", "device_limit", "replaced"])
            #expect(written.isSubset(of: allowed))
            try await expectRoundTrips(DeactivationReason.self, client)
        }
    }

    /// A reason outside the list is refused when it is written, not when a program reads the device.
    @Test func anUnknownReasonIsRefusedWhenWritten() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let app = try await addApp(client)
            _ = try await client.query("INSERT INTO push_devices (user_id, app_id, token, platform) VALUES (1, \(app), 'tok-1', 'ios')")
            await #expect(throws: PSQLError.self) {
                _ = try await client.query(
                    """
                    UPDATE push_devices SET is_active = false, deactivated_at = now(), deactivation_reason = 'uninstalled'
                    """)
            }
            #expect(try await rows(client, token: "tok-1").map(\.2) == [nil])
        }
    }

    /// Messages and logs spell a reason as the database does, not as the Swift case.
    @Test func aReasonIsInterpolatedAsTheDatabaseSpellsIt() {
        #expect("\(DeactivationReason.accountSwitch)" == "account_switch")
        #expect("\(DeactivationReason.senderIDMismatch)" == "sender_id_mismatch")
    }
}
