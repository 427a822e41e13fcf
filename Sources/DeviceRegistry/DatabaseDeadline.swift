/// Bounds how long a request waits for the database. PostgresClient queues requests while it
/// retries a lost database (its circuit breaker trips only after a minute), so without a bound
/// a client would hang instead of getting a prompt 503 to retry on. Cancelling a wait for a
/// connection leaves the pool's queue cleanly.
struct DatabaseDeadline: Sendable {
    let limit: Duration

    func run<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await body() }
            group.addTask {
                try await Task.sleep(for: limit)
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let value = first else {
                throw PostgresUnavailable()
            }
            return value
        }
    }
}
