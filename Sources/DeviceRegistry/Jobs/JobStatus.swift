/// Where a job is in its life (`push_jobs.status`): queued until its send time, running while
/// its audience is expanded and sent, then finished for good in one of three ways.
public enum JobStatus: String, TextColumnEnum, Encodable {
    case queued, running, completed, failed, cancelled

    /// The endings: a job in one of them keeps it, and has its `finished_at`.
    public static let finished: [JobStatus] = [.completed, .failed, .cancelled]

    public var isFinished: Bool { Self.finished.contains(self) }
}
