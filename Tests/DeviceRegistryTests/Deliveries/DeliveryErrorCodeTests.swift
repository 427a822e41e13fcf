import DeviceRegistry
import Foundation
import PostgresNIO
import TestSupport
import Testing

/// `push_deliveries.error_code` as ``DeliveryErrorCode``: the codes this project writes, in Swift
/// and in its SQL functions, are the named ones, and each is explained where users read them.
@Suite struct DeliveryErrorCodeTests {
    /// Every code a SQL function of the migrated schema writes into `error_code` is one of ours.
    @Test func theCodesTheSQLFunctionsWriteAreNamed() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            var written: Set<String> = []
            for try await definition in try await client.query(
                "SELECT pg_get_functiondef(p.oid) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'"
            ).decode(String.self) {
                let literals = definition.matches(of: /error_code\s*=\s*'([A-Z_]+)'/).map { String($0.output.1) }
                written.formUnion(literals)
            }
            #expect(written.contains("EXPIRED"), "push_expire_jobs writes EXPIRED: the pattern must see it")
            #expect(written.subtracting(DeliveryErrorCode.written.map(\.rawValue)).isEmpty, "\(written)")
        }
    }

    /// docs/sending.md's table explains each code this project writes.
    @Test func everyCodeOfOursIsExplainedInTheSendingGuide() throws {
        let guide = try String(
            contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
                .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("docs/sending.md"), encoding: .utf8)
        let explained = Set(guide.matches(of: /^\| `([A-Z_]+)` \|/.anchorsMatchLineEndings()).map { String($0.output.1) })
        #expect(explained == Set(DeliveryErrorCode.written.map(\.rawValue)))
    }

    @Test func aCodeIsBoundAsTextAndKeptAsFCMSpellsIt() async throws {
        try await TestPostgres.shared.makeDatabase().withClient { client in
            let codes: [DeliveryErrorCode] = [.unregistered, .httpStatus(502), DeliveryErrorCode(rawValue: "A_CODE_NEWER_THAN_US")]
            var read: [String] = []
            for try await text in try await client.query("SELECT unnest(\(codes)::text[])").decode(String.self) { read.append(text) }
            #expect(read == ["UNREGISTERED", "HTTP_502", "A_CODE_NEWER_THAN_US"])
        }
    }
}
