import Foundation
import Logging
import PostgresNIO

/// How far the server the audit is read from is behind the primary, as the audit shows it.
public enum ReplicaLag: Sendable, Equatable, CustomStringConvertible {
    /// Not in recovery: the read URL leads to a primary, which is never behind itself.
    case notAStandby
    /// Everything the standby received is replayed: no lag, however long ago the last write was
    /// (an idle primary sends nothing, so the last replayed commit's age says nothing then).
    case caughtUp
    /// WAL received and not replayed yet: `seconds` since the last replayed transaction
    /// committed on the primary; nil when none has been replayed since the standby started.
    case behind(seconds: Double?)

    /// Read on the server `client` connects to: one statement of built-in functions.
    public static func read(_ client: PostgresClient, logger: Logger) async throws -> ReplicaLag {
        let rows = try await DatabaseStatement.run(
            """
            SELECT pg_is_in_recovery(),
                   pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn(),
                   extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8
            """, on: client, logger: logger)
        guard let (inRecovery, replayedAll, age) = try rows.first?.decode((Bool, Bool, Double?).self), inRecovery else {
            return .notAStandby
        }
        return replayedAll ? .caughtUp : .behind(seconds: age.map { max(0, $0) })
    }

    /// Seconds behind: 0 when caught up (or not a standby), nil when unknown.
    public var seconds: Double? {
        switch self {
        case .notAStandby, .caughtUp: 0
        case .behind(let seconds): seconds
        }
    }

    public var description: String {
        switch self {
        case .notAStandby: "not a standby"
        case .caughtUp: "no lag"
        case .behind(let seconds?): "\(Self.format(seconds)) s behind"
        case .behind(nil): "behind, by how long unknown (nothing replayed since it started)"
        }
    }

    private static func format(_ seconds: Double) -> String {
        seconds < 10 ? String(format: "%.1f", seconds) : String(Int(seconds.rounded()))
    }
}
