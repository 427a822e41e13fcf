/// A job's scheduling priority (`push_jobs.priority`): which jobs workers expand and send first
/// when they share capacity. Not FCM's `android.priority` / `apns-priority`, which only the
/// message sets.
public enum JobPriority: String, TextColumnEnum, Comparable, Encodable {
    /// One user's notification (a chat message, a login code): `push_enqueue`'s default.
    case high
    case normal
    /// A campaign to a whole app: `push_enqueue_campaign`'s default.
    case bulk

    /// Lower goes first.
    public var rank: Int {
        switch self {
        case .high: 0
        case .normal: 1
        case .bulk: 2
        }
    }

    public static func < (lhs: JobPriority, rhs: JobPriority) -> Bool { lhs.rank < rhs.rank }
}
