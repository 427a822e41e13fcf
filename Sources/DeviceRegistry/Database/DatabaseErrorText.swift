import PostgresNIO

/// PostgresNIO's `PSQLError.description` deliberately hides the server's message; operators
/// running the CLI need it, so this reads it out. Never the DETAIL: it quotes the row or key
/// ("Failing row contains (…)"), and with it a whole device token or a private key.
public enum DatabaseErrorText {
    public static func describe(_ error: any Error) -> String {
        if isPoolError(error) {
            return "no connection could be opened (is the server running and reachable?)"
        }
        guard let error = error as? PSQLError else { return "\(error)" }
        if let message = error.serverInfo?[.message] { return message }
        return "\(error.code)"
    }

    /// The SQLSTATE of a server error, e.g. `.deadlockDetected` (40P01).
    public static func sqlState(_ error: any Error) -> PostgresError.Code? {
        (error as? PSQLError)?.serverInfo?[.sqlState].map(PostgresError.Code.init(raw:))
    }

    /// True when the error came from the database server itself (the connection worked).
    public static func isServerError(_ error: any Error) -> Bool {
        (error as? PSQLError)?.serverInfo != nil
    }

    /// True when the database could not be reached or is going away: no connection, a lost
    /// one, or the server shutting down, starting up or out of resources (SQLSTATE classes 08,
    /// 53 and 57P), the kinds that end by themselves. False for a statement the server refused
    /// (a syntax error, a missing column, a violated constraint), which retrying will not fix.
    public static func isOutage(_ error: any Error) -> Bool {
        if isPoolError(error) || error is DatabaseStatement.ConnectionLost { return true }
        guard let error = error as? PSQLError else { return false }
        guard let state = sqlState(error) else { return true }  // the connection failed, not a statement
        return state.isInClass(of: .connectionException) || state.isInClass(of: .insufficientResources)
            || state.raw.hasPrefix("57P")
    }

    /// The connection pool's own error (no connection could be made, the circuit breaker is
    /// open). Its type lives in postgres-nio's underscored `_ConnectionPoolModule`, no API to
    /// depend on, so it is told by its name.
    public static func isPoolError(_ error: any Error) -> Bool {
        String(reflecting: type(of: error)).contains("ConnectionPoolError")
    }
}

extension PostgresError.Code {
    /// Whether both are of one class (the SQLSTATE's first two characters), e.g.
    /// `.invalidParameterValue` (22023) is one of the `.dataException`s (22000).
    public func isInClass(of other: PostgresError.Code) -> Bool {
        raw.prefix(2) == other.raw.prefix(2)
    }
}
