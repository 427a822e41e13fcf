import DeviceRegistry
import NIOCore
import NIOPosix

/// Bounds how long a request waits for the database. PostgresClient queues requests while it
/// retries a lost database (its circuit breaker trips only after 15 s), so without a bound
/// a client would hang instead of getting a prompt 503 to retry on. Cancelling a wait for a
/// connection leaves the pool's queue cleanly; a statement already sent cannot be cancelled, so
/// the deadline waits for it, and an answer it then gets is still the answer (a 503 for work the
/// database did would invite a duplicate). Statements that must not outlive the deadline carry
/// it to the server as their `statement_timeout`.
public struct DatabaseDeadline: Sendable {
    public let limit: Duration

    public init(limit: Duration) {
        self.limit = limit
    }

    public func run<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
        try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await body() }
            group.addTask {
                try await Self.sleep(for: limit)
                return nil
            }
            defer { group.cancelAll() }
            if let value = try await group.next() ?? nil { return value }
            group.cancelAll()
            do {
                if let value = try await group.next() ?? nil { return value }
            } catch  where !Self.meansUnavailable(error) {
                // The statement was refused (a bad value, an unknown app), as the database said it
                // or as the caller read it (EnqueueRejected): the answer, however late.
                throw error
            } catch {
                // Cancelled while waiting for a connection, or stopped by the server's timeout.
            }
            throw DatabaseUnavailable(waited: limit)
        }
    }

    /// A late error that says only that the deadline passed: the wait for a connection was
    /// cancelled, the server stopped the statement at its timeout, or the database is away.
    private static func meansUnavailable(_ error: any Error) -> Bool {
        error is CancellationError || DatabaseErrorText.isOutage(error) || DatabaseErrorText.sqlState(error) == .queryCanceled
    }

    /// `Task.sleep` on an event loop timer: a dispatch timer per request costs a thread wake-up
    /// and about 5% of a registration's CPU; an event loop timer is an entry in a heap.
    private static func sleep(for duration: Duration) async throws {
        let timer = MultiThreadedEventLoopGroup.singleton.any().scheduleTask(in: TimeAmount(duration)) {}
        try await withTaskCancellationHandler {
            try await timer.futureResult.get()
        } onCancel: {
            timer.cancel()
        }
    }
}

/// No answer from the database within the deadline.
public struct DatabaseUnavailable: Error, CustomStringConvertible {
    public let waited: Duration

    public init(waited: Duration) {
        self.waited = waited
    }

    public var description: String { "no answer from the database within \(waited)" }
}
