import Synchronization

/// Wakes the dispatch loop early: a NOTIFY on `push_jobs`, or a graceful shutdown. A signal
/// that arrives while nobody waits is remembered once.
final class WakeSignal: Sendable {
    private struct State {
        var pending = false
        var waiter: CheckedContinuation<Void, Never>?
    }
    private let state = Mutex(State())

    func signal() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard let waiter = state.waiter else {
                state.pending = true
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }

    /// Returns on a signal or after `timeout`, whichever comes first.
    func wait(upTo timeout: Duration) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.parkUntilSignalled() }
            group.addTask { try? await Task.sleep(for: timeout) }
            await group.next()
            group.cancelAll()
            releaseWaiter()
        }
    }

    /// Returns on a signal only, whatever the task's cancellation: for the writer, which must
    /// outlive a cancelled send loop until that loop closes the outbox (a cancelled
    /// `wait(upTo:)` returns at once, and a loop around it would spin).
    func waitForSignal() async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if state.pending {
                    state.pending = false
                    return true
                }
                state.waiter = continuation
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Cancellation-aware: `wait(upTo:)` cancels this when its timer wins, possibly before this
    /// has parked; checking under the lock and releasing on cancel means it never parks for good.
    private func parkUntilSignalled() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let now = state.withLock { state -> Bool in
                    if state.pending {
                        state.pending = false
                        return true
                    }
                    if Task.isCancelled { return true }
                    state.waiter = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            releaseWaiter()
        }
    }

    /// The timer won: let the parked waiter go without leaving a signal behind.
    private func releaseWaiter() {
        state.withLock { state -> CheckedContinuation<Void, Never>? in
            defer { state.waiter = nil }
            return state.waiter
        }?.resume()
    }
}
