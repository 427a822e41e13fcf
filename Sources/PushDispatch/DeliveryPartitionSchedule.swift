/// When push-worker looks after the delivery log's partitions: at start and every hour it
/// creates the week ahead's; at start and once a day it drops the days past the retention. A
/// failed run is tried again at the next hourly tick: creating, as always; dropping, rather
/// than a day later.
struct DeliveryPartitionSchedule: Sendable {
    enum Work: Equatable, Sendable {
        case createAhead
        case dropOldDays
    }

    static let tickInterval: Duration = .seconds(3600)
    static let dropInterval: Duration = .seconds(86_400)

    /// When the next tick is due.
    private(set) var nextTick: ContinuousClock.Instant
    /// When the next drop is due; nil when nothing is ever dropped (retention off).
    private var nextDrop: ContinuousClock.Instant?
    /// The tick the last ``tick(at:)`` ran, from which a successful drop counts its day.
    private var lastTick: ContinuousClock.Instant

    init(dropsOldDays: Bool, start: ContinuousClock.Instant) {
        nextTick = start
        lastTick = start
        nextDrop = dropsOldDays ? start : nil
    }

    /// What is due at `now`, in order (nothing before the next tick), and the tick after: an
    /// hour on, or the first of the hourly ticks still ahead when some were missed (a machine
    /// suspended, a run that took long).
    mutating func tick(at now: ContinuousClock.Instant) -> [Work] {
        guard now >= nextTick else { return [] }
        lastTick = nextTick
        repeat { nextTick += Self.tickInterval } while nextTick <= now
        guard let nextDrop, nextDrop <= now else { return [.createAhead] }
        return [.createAhead, .dropOldDays]
    }

    /// The drop of the last tick went through: the next is a day after that tick. Not called
    /// after a failed one, which stays due.
    mutating func dropped() {
        nextDrop = lastTick + Self.dropInterval
    }
}
