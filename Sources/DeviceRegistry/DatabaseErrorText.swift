import PostgresNIO

/// PostgresNIO's `PSQLError.description` deliberately hides the server's message; operators
/// running the CLI need it, so this reads it out. Never the DETAIL: it quotes the row or key
/// ("Failing row contains (…)"), and with it a whole device token or a private key.
public enum DatabaseErrorText {
    public static func describe(_ error: any Error) -> String {
        if String(reflecting: type(of: error)).contains("ConnectionPoolError") {
            return "no connection could be opened (is the server running and reachable?)"
        }
        guard let error = error as? PSQLError else { return "\(error)" }
        if let message = error.serverInfo?[.message] { return message }
        return "\(error.code)"
    }

    /// The SQLSTATE of a server error, e.g. `40P01` for a deadlock.
    public static func sqlState(_ error: any Error) -> String? {
        (error as? PSQLError)?.serverInfo?[.sqlState]
    }

    /// True when the error came from the database server itself (the connection worked).
    public static func isServerError(_ error: any Error) -> Bool {
        (error as? PSQLError)?.serverInfo != nil
    }
}
