import DeviceRegistry

/// How one claim's room is shared among the due audiences still to expand: by priority, each
/// priority present getting its weight's share (``ReadyLanes/weights``), so that bulk still moves
/// while high-priority jobs keep coming; within a priority, equally among apps, and an app's part
/// equally among its due jobs. So two apps' campaigns run side by side instead of one after the
/// other, and a notification to a few users is claimed at once beside a campaign (or a job to
/// thousands of users) of its own app and priority. What a job leaves of its share (its audience
/// ran out) goes to the others when the claim plans again.
enum AudienceShares {
    /// The fewest devices a share holds: more apps or jobs than the room has shares of this size
    /// take turns, claim by claim (`turn`).
    static let minimumShare = 16

    /// The jobs to expand next and how many devices each may take, highest priority first, for
    /// `audiences` in priority then due order. `turn` counts the claims: within a priority, the
    /// apps are taken from a different one each time, and an app's jobs from a different one each
    /// round of apps, so that those a small room leaves out this time come first later.
    static func plan(_ audiences: [DeliveryQueue.Audience], room: Int, turn: Int = 0, minimum: Int = minimumShare)
        -> [(audience: DeliveryQueue.Audience, limit: Int)]
    {
        guard room > 0 else { return [] }
        // Per priority, the apps in the order of their earliest due job, each with its due jobs.
        var byPriority: [JobPriority: [[DeliveryQueue.Audience]]] = [:]
        var place: [[Int64]: Int] = [:]
        for audience in audiences {
            let key = [Int64(audience.priority.rank), audience.app]
            if let index = place[key] {
                byPriority[audience.priority]![index].append(audience)
            } else {
                place[key] = byPriority[audience.priority, default: []].count
                byPriority[audience.priority, default: []].append([audience])
            }
        }
        let present = JobPriority.allCases.filter { byPriority[$0] != nil }
        let totalWeight = present.reduce(0) { $0 + ReadyLanes.weights[$1]! }
        var plan: [(audience: DeliveryQueue.Audience, limit: Int)] = []
        var left = room
        for priority in present {
            guard left > 0 else { break }
            let apps = rotated(byPriority[priority]!, by: turn)
            let share = min(left, max(minimum, room * ReadyLanes.weights[priority]! / totalWeight))
            let each = max(minimum, share / apps.count)
            var given = 0
            for jobs in apps where given < share {
                let part = min(each, share - given)
                // A job's share is an expansion statement: at least a chunk's worth.
                let perJob = max(minimum, DeliveryQueue.chunkSize, part / jobs.count)
                var taken = 0
                // An app's jobs move on once per round of its priority's apps: by `turn` alone,
                // an app served every third claim would see the same one of its three jobs.
                for audience in rotated(jobs, by: turn / apps.count) where taken < part {
                    let limit = min(perJob, part - taken)
                    plan.append((audience, limit))
                    taken += limit
                }
                given += taken
            }
            left -= given
        }
        return plan
    }

    private static func rotated<T>(_ items: [T], by turn: Int) -> [T] {
        guard items.count > 1 else { return items }
        let start = turn % items.count
        return Array(items[start...] + items[..<start])
    }
}
