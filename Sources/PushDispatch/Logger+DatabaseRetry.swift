import DeviceRegistry
import Logging

extension Logger {
    /// An outage is waited out with a warning; a statement the database refused is retried too
    /// (nothing else would do the work), but said as an error with its SQLSTATE: it is a bug or a
    /// schema out of step with this build, not a database that went away.
    /// `task`: what was being done, for the operator reading the line.
    func databaseRetry(after error: any Error, retryIn wait: Duration, task: String) {
        let metadata: Logger.Metadata = [
            "push.error": "\(DatabaseErrorText.describe(error))", "push.retry_in": "\(wait.toTheMillisecond)", "push.task": "\(task)",
        ]
        if DatabaseErrorText.isOutage(error) {
            warning("database unavailable, retrying", metadata: metadata)
        } else {
            var metadata = metadata
            let state = DatabaseErrorText.sqlState(error)
            metadata["push.sqlstate"] = "\(state?.raw ?? "none")"
            if state == .insufficientPrivilege {
                metadata["push.hint"] = "run push-worker as the role that owns the tables (the one pushctl migrate ran as)"
            }
            self.error("database refused a statement, retrying", metadata: metadata)
        }
    }
}
