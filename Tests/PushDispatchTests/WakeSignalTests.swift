import Testing

@testable import PushDispatch

@Suite("WakeSignal")
struct WakeSignalTests {
    /// Under cancellation the timer wins at once, often before the waiter has parked; a parked
    /// waiter nobody releases would hang the worker's shutdown forever.
    @Test(.timeLimit(.minutes(1)))
    func waitsInACancelledTaskAlwaysReturn() async {
        let signal = WakeSignal()
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                withUnsafeCurrentTask { $0?.cancel() }
                for _ in 0..<2000 { await signal.wait(upTo: .seconds(3600)) }
            }
        }
    }

    @Test(.timeLimit(.minutes(1)))
    func aSignalWakesAWaiterAndAnEarlySignalIsRemembered() async {
        let signal = WakeSignal()
        signal.signal()
        await signal.wait(upTo: .seconds(3600))  // remembered: returns at once
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await signal.wait(upTo: .seconds(3600)) }
            group.addTask {
                try? await Task.sleep(for: .milliseconds(50))
                signal.signal()
            }
        }
    }
}
