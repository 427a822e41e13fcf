/// How long one database session is ours, by what stands between a program and PostgreSQL (a
/// database URL's `?pooler=`). Directly connected, or through a pooler in session mode, a
/// connection is one session for as long as it is open. Through a pooler in transaction mode
/// (PgBouncer's `pool_mode = transaction`) each transaction, and each statement outside one,
/// may run on another server session, so nothing may outlive a transaction: no named prepared
/// statement (PgBouncer before 1.21 does not carry them across), no LISTEN, no session
/// advisory lock, no plain SET.
public enum PoolerMode: String, Sendable, CaseIterable {
    case session
    case transaction

    /// Whether state a statement leaves in its session (a prepared statement, a LISTEN) is still
    /// there for the next statement on the same connection.
    public var keepsSessionState: Bool { self == .session }
}
