import DeviceRegistry
import Foundation
import Logging
import PostgresNIO

/// The console's signed-out sessions (`console_sign_outs`), on the primary: a sign-out reaches
/// every push-api replica at once, which a standby's lag would delay.
struct ConsoleSignOuts: Sendable {
    let client: PostgresClient
    let logger: Logger

    /// Refuses the session's cookie from now on; rows of cookies that have expired since go.
    func record(_ session: ConsoleSession) async throws {
        try await DatabaseStatement.run(
            """
            WITH expired AS (DELETE FROM console_sign_outs WHERE expires_at <= now())
            INSERT INTO console_sign_outs (session_id, expires_at) VALUES (\(session.id), \(session.expires))
            ON CONFLICT (session_id) DO NOTHING
            """, on: client, logger: logger)
    }

    func contains(_ session: ConsoleSession) async throws -> Bool {
        let rows = try await DatabaseStatement.run(
            "SELECT EXISTS (SELECT FROM console_sign_outs WHERE session_id = \(session.id))", on: client, logger: logger)
        return try rows.first?.decode(Bool.self) ?? false
    }
}
