import DeviceRegistry

/// How a worker learns that a job was queued. `push_enqueue` NOTIFYs `push_jobs` at commit;
/// a LISTEN wakes the worker at once. LISTEN needs a session that lasts, which a pooler in
/// transaction mode does not give (it would register on whichever server session the pooler
/// picked and never reach us): there it takes a direct connection of its own
/// (`DATABASE_LISTEN_URL`), or none, and the poll, which every worker runs anyway, finds new
/// jobs within ``DispatchConfiguration/pollInterval``.
public enum JobWakeUps: Sendable, Equatable {
    /// LISTEN on a connection of the pool (`DATABASE_URL` keeps its sessions).
    case listenOnPool
    /// LISTEN on a connection of its own to this URL (`DATABASE_LISTEN_URL`).
    case listen(url: String)
    /// No LISTEN: only the poll finds new jobs.
    case polling

    /// A `DATABASE_LISTEN_URL` is used whenever set; without one, the pool's connections are
    /// listened on unless they go through a transaction pooler.
    public init(databasePooler: PoolerMode, listenURL: String?) {
        if let listenURL {
            self = .listen(url: listenURL)
        } else {
            self = databasePooler.keepsSessionState ? .listenOnPool : .polling
        }
    }

    /// For the start-up log line.
    var summary: String {
        switch self {
        case .listenOnPool: "listen"
        case .listen: "listen on DATABASE_LISTEN_URL"
        case .polling: "polling"
        }
    }
}
