/// How long to wait before sending again after a failure: exponential backoff with jitter, or
/// the server's `Retry-After`.
public struct RetryPolicy: Sendable, Equatable {
    /// The wait after the first failure, before jitter.
    public var initialDelay: Duration
    /// The longest wait between two attempts, before jitter.
    public var maximumDelay: Duration
    /// The longest `Retry-After` honoured; a longer one is cut to this.
    public var maximumRetryAfter: Duration

    public init(initialDelay: Duration = .seconds(1), maximumDelay: Duration = .seconds(300), maximumRetryAfter: Duration = .seconds(3600))
    {
        self.initialDelay = initialDelay
        self.maximumDelay = maximumDelay
        self.maximumRetryAfter = maximumRetryAfter
    }

    /// 1 s, 2 s, 4 s … up to five minutes; `Retry-After` honoured up to an hour.
    public static let standard = RetryPolicy()

    /// The wait after `failures` consecutive failures (1 for the first). With `retryAfter` (the
    /// server's), exactly that; otherwise the exponential delay with "equal jitter": between half
    /// of it and all of it, as `jitter` (0 ..< 1) picks, so clients that failed together do not
    /// come back together.
    public func delay(afterFailures failures: Int, retryAfter: Duration?, jitter: Double) -> Duration {
        if let retryAfter { return min(max(retryAfter, .zero), maximumRetryAfter) }
        // 2^(failures - 1), with the exponent bounded so the multiplication cannot overflow.
        let doublings = min(max(failures - 1, 0), 30)
        let exponential = min(initialDelay * (1 << doublings), maximumDelay)
        let fraction = 0.5 + 0.5 * min(max(jitter, 0), 1)
        return exponential * fraction
    }
}
