import Foundation

@testable import PushDispatch

extension DeliveryQueue {
    /// What a worker takes of the oldest due job's audience, up to `limit`, as it would before
    /// sending (`complete`: nothing is left to take).
    func expandOldestJob(limit: Int) async throws -> (claimed: [Claimed], complete: Bool) {
        guard let audience = try await unexpandedJobs(excludingApps: [], excludingJobs: [], limit: 1).first else { return ([], true) }
        return try await expandAndClaim(audience, limit: limit)
    }
}

extension DeliveryQueue.Result {
    /// Each claimed delivery sent, as the worker records an accepted send.
    static func sent(_ claimed: some Collection<DeliveryQueue.Claimed>) -> [DeliveryQueue.Result] {
        claimed.map { .init($0, status: .sent, errorCode: nil, errorMessage: nil, messageID: "m", attempted: true, nextAttempt: Date()) }
    }
}

extension DeliveryQueue.Lease {
    var chunkID: Int64? {
        if case .chunk(let id) = self { id } else { nil }
    }
}
