import DeviceRegistry

/// How one claim's room is shared among the due audiences still to expand: by priority, each
/// priority present getting its weight's share (``ReadyLanes/weights``), so that bulk still moves
/// while high-priority jobs keep coming; within a priority, equally among apps, one job per app at
/// a time (the earliest due), so that two apps' campaigns run side by side instead of one after
/// the other. What a job leaves of its share (its audience ran out) goes to the others when the
/// claim plans again.
enum AudienceShares {
    /// The fewest devices a share holds: more apps than the room has shares of this size take
    /// turns, claim by claim (`turn`).
    static let minimumShare = 16

    /// The jobs to expand next and how many devices each may take, highest priority first, for
    /// `audiences` in priority then due order. `turn` counts the claims: within a priority, the
    /// apps are taken from a different one each time, so that those a small room leaves out this
    /// time come first the next.
    static func plan(_ audiences: [DeliveryQueue.Audience], room: Int, turn: Int = 0, minimum: Int = minimumShare)
        -> [(audience: DeliveryQueue.Audience, limit: Int)]
    {
        guard room > 0 else { return [] }
        // The earliest due job of each app, per priority.
        var byPriority: [JobPriority: [DeliveryQueue.Audience]] = [:]
        var seen: Set<[Int64]> = []
        for audience in audiences where seen.insert([Int64(audience.priority.rank), audience.app]).inserted {
            byPriority[audience.priority, default: []].append(audience)
        }
        for (priority, jobs) in byPriority where jobs.count > 1 {
            let start = turn % jobs.count
            byPriority[priority] = Array(jobs[start...] + jobs[..<start])
        }
        let present = JobPriority.allCases.filter { byPriority[$0] != nil }
        let totalWeight = present.reduce(0) { $0 + ReadyLanes.weights[$1]! }
        var plan: [(audience: DeliveryQueue.Audience, limit: Int)] = []
        var left = room
        for priority in present {
            guard left > 0 else { break }
            let jobs = byPriority[priority]!
            let share = min(left, max(minimum, room * ReadyLanes.weights[priority]! / totalWeight))
            let each = max(minimum, share / jobs.count)
            var given = 0
            for audience in jobs where given < share {
                let limit = min(each, share - given)
                plan.append((audience, limit))
                given += limit
            }
            left -= given
        }
        return plan
    }
}
