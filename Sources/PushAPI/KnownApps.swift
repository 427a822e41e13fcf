import DeviceRegistry
import Foundation
import ServiceSupport
import Synchronization

/// Remembers which app ids exist, so the hot registration path does not ask the database on
/// every request. Only positive answers are cached (for `ttl`): an app added a moment ago is
/// found on the next request.
final class KnownApps: Sendable {
    private let directory: AppDirectory
    private let deadline: DatabaseDeadline
    private let ttl: Duration
    private let seen: Mutex<[Int64: ContinuousClock.Instant]> = Mutex([:])

    init(directory: AppDirectory, deadline: DatabaseDeadline, ttl: Duration = .seconds(60)) {
        self.directory = directory
        self.deadline = deadline
        self.ttl = ttl
    }

    func contains(_ appID: Int64) async throws -> Bool {
        let now = ContinuousClock.now
        if let until = seen.withLock({ $0[appID] }), until > now { return true }
        let directory = self.directory
        guard try await deadline.run({ try await directory.exists(id: appID) }) else { return false }
        seen.withLock { $0[appID] = now + ttl }
        return true
    }
}
