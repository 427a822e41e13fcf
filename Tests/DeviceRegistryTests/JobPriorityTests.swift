import DeviceRegistry
import PostgresNIO
import Testing
import TestSupport

/// `push_jobs.priority` read as ``JobPriority``: every value the schema allows, and nothing else.
@Suite struct JobPriorityTests {
    @Test func everyPriorityTheSchemaAllowsDecodes() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let allowed = try await client.query("""
                SELECT unnest(regexp_matches(pg_get_constraintdef(oid), '''(\\w+)''', 'g'))
                  FROM pg_constraint WHERE conrelid = 'push_jobs'::regclass AND pg_get_constraintdef(oid) LIKE '%priority%'
                """)
            var names: [String] = []
            for try await name in allowed.decode(String.self) { names.append(name) }
            #expect(Set(names) == Set(JobPriority.allCases.map(\.rawValue)))
            for priority in JobPriority.allCases {
                for try await decoded in try await client.query("SELECT \(priority.rawValue)::text").decode(JobPriority.self) {
                    #expect(decoded == priority)
                }
            }
        }
    }

    @Test func anUnknownPriorityFailsTheRowRatherThanBecomingAnother() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            await #expect(throws: PostgresDecodingError.self) {
                for try await _ in try await client.query("SELECT 'urgent'::text").decode(JobPriority.self) {}
            }
        }
    }
}
