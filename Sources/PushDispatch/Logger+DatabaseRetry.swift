import DeviceRegistry
import Logging

extension Logger {
    /// An outage is waited out with a warning; a statement the database refused is retried too
    /// (nothing else would do the work), but said as an error with its SQLSTATE: it is a bug or a
    /// schema out of step with this build, not a database that went away.
    func databaseRetry(after error: any Error, retryIn wait: Duration) {
        let metadata: Logger.Metadata = ["push.error": "\(DatabaseErrorText.describe(error))", "push.retry_in": "\(wait)"]
        if DatabaseErrorText.isOutage(error) {
            warning("database unavailable, retrying", metadata: metadata)
        } else {
            var metadata = metadata
            metadata["push.sqlstate"] = "\(DatabaseErrorText.sqlState(error)?.raw ?? "none")"
            self.error("database refused a statement, retrying", metadata: metadata)
        }
    }
}
