import Logging
import PostgresNIO

/// Where the audit (jobs, deliveries and devices as listed) is read: the primary, or a
/// streaming standby (`DATABASE_READ_URL`), so that an operator's long listings and exports
/// take nothing from the primary's sends and registrations. Writes never come here.
public enum AuditSource: Sendable {
    case primary(PostgresClient)
    case replica(PostgresClient)

    public var client: PostgresClient {
        switch self {
        case .primary(let client), .replica(let client): client
        }
    }

    /// The standby's lag, shown beside what was read from it; nil when reading the primary.
    public func lag(logger: Logger) async throws -> ReplicaLag? {
        guard case .replica(let client) = self else { return nil }
        return try await ReplicaLag.read(client, logger: logger)
    }
}
