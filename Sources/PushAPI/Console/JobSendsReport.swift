import DeviceRegistry
import Foundation
import Logging
import PostgresNIO

/// How a stretch of time is cut into a chart's slots: the smallest round length (a second up to
/// a week, then whole weeks) that needs at most `maximumCount` slots, the first slot starting at
/// a multiple of it in UTC, so that a job of seconds is drawn by the second and one of days by
/// the hour or the day.
struct TimeSlots: Sendable, Equatable {
    /// The first slot's start.
    let start: Date
    let seconds: Int
    let count: Int

    static let maximumCount = 60
    static let roundLengths = [
        1, 2, 5, 10, 15, 30, 60, 2 * 60, 5 * 60, 10 * 60, 15 * 60, 30 * 60,
        3600, 2 * 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400, 7 * 86400,
    ]

    func start(ofSlot index: Int) -> Date {
        start.addingTimeInterval(Double(index * seconds))
    }

    /// The end of the last slot.
    var end: Date { start(ofSlot: count) }

    /// One slot's length: `second`, `10 seconds`, `5 minutes`, `hour`, `2 days`, `week`.
    var name: String {
        let (amount, unit) =
            switch seconds {
            case ..<60: (seconds, "second")
            case ..<3600: (seconds / 60, "minute")
            case ..<86400: (seconds / 3600, "hour")
            case ..<(7 * 86400): (seconds / 86400, "day")
            default: (seconds / (7 * 86400), "week")
            }
        return amount == 1 ? unit : "\(amount) \(unit)s"
    }
}

extension TimeSlots {
    /// Slots from the one holding `from` to the one holding `through` (the same when `through` is earlier).
    init(from: Date, through: Date) {
        let first = Int(from.timeIntervalSince1970.rounded(.down))
        let last = max(first, Int(through.timeIntervalSince1970.rounded(.down)))
        func fits(_ length: Int) -> Bool { Self.slot(of: last, length) - Self.slot(of: first, length) < Self.maximumCount }
        var length = Self.roundLengths.first(where: fits) ?? 0
        if length == 0 {
            let week = 7 * 86400
            var weeks = max(2, (last - first) / (week * (Self.maximumCount - 1)))
            while !fits(weeks * week) { weeks += 1 }
            length = weeks * week
        }
        let firstSlot = Self.slot(of: first, length)
        self.start = Date(timeIntervalSince1970: Double(firstSlot * length))
        self.seconds = length
        self.count = Self.slot(of: last, length) - firstSlot + 1
    }

    /// Floor division: which slot of `length` seconds since 1970 holds `second` (before 1970 too).
    private static func slot(of second: Int, _ length: Int) -> Int {
        second >= 0 ? second / length : -((-second + length - 1) / length)
    }

}

/// A job's deliveries over the job's span, counted per slot by status: what its page charts.
struct JobSends: Sendable, Equatable {
    let slots: TimeSlots
    /// `counts[0]` is the first slot's.
    var counts: [SendCounts]

    var total: SendCounts { SendCounts.sum(counts) }

    /// The chart, its axis labelled with UTC times as precise as the slots.
    func chart(id: String) -> SendsChart {
        let bars = counts.enumerated().map { index, counts in
            SendsChart.Bar(label: label(slots.start(ofSlot: index)), counts: counts)
        }
        // Four labels at most, so that they never overlap.
        let step = max(1, (slots.count + 3) / 4)
        let ticks = stride(from: 0, to: slots.count, by: step).map { SendsChart.Tick(bar: $0, label: label(slots.start(ofSlot: $0))) }
        return SendsChart(
            id: id, title: "Sends of this job by \(slots.name), from \(ConsoleText.time(slots.start)) to \(ConsoleText.time(slots.end))",
            slot: slots.name, bars: bars, ticks: ticks, end: label(slots.end))
    }

    /// `14:05:10` for slots of seconds, `14:05` for longer ones within a day (`11-21 14:05` when
    /// the span crosses midnight), `11-21` for days, `2026-11-21` for weeks.
    func label(_ date: Date) -> String {
        // UTC days are whole multiples of 86,400 s since 1970.
        let sameDay = Int(slots.start.timeIntervalSince1970) / 86400 == (Int(slots.end.timeIntervalSince1970) - 1) / 86400
        let format: Date.FormatString =
            switch slots.seconds {
            case ..<60: "\(hour: .twoDigits(clock: .twentyFourHour, hourCycle: .zeroBased)):\(minute: .twoDigits):\(second: .twoDigits)"
            case ..<86400 where sameDay: "\(hour: .twoDigits(clock: .twentyFourHour, hourCycle: .zeroBased)):\(minute: .twoDigits)"
            case ..<86400:
                "\(month: .twoDigits)-\(day: .twoDigits) \(hour: .twoDigits(clock: .twentyFourHour, hourCycle: .zeroBased)):\(minute: .twoDigits)"
            case ..<(7 * 86400): "\(month: .twoDigits)-\(day: .twoDigits)"
            default: "\(year: .defaultDigits)-\(month: .twoDigits)-\(day: .twoDigits)"
            }
        return date.formatted(Date.VerbatimFormatStyle(format: format, timeZone: .gmt, calendar: Calendar(identifier: .gregorian)))
    }
}

/// A job's sends over time. The job's span is read from its row (from when a worker started it,
/// or its send time, to when it ended, or now), so the deliveries are read once: through the
/// job's index, as the page's outcome counts read them, never the whole log.
struct JobSendsReport: Sendable {
    let client: PostgresClient
    let logger: Logger

    /// nil for an unknown job.
    func sends(job: Int64, now: Date = Date()) async throws -> JobSends? {
        let spans = try await DatabaseStatement.run(Self.spanStatement(job: job), on: client, logger: logger)
        guard let (start, finished) = try spans.first?.decode((Date, Date?).self) else { return nil }
        let end = finished ?? now
        let span = (start: min(start, end), end: end)
        let slots = TimeSlots(from: span.start, through: span.end)
        var sends = JobSends(slots: slots, counts: [SendCounts](repeating: SendCounts(), count: slots.count))
        for row in try await DatabaseStatement.run(Self.countsStatement(job: job, slots: slots), on: client, logger: logger) {
            let (slot, status, count) = try row.decode((Int, DeliveryStatus, Int).self)
            sends.counts[slot].add(status, count)
        }
        return sends
    }

    static func spanStatement(job: Int64) -> PostgresQuery {
        "SELECT COALESCE(started_at, send_at), finished_at FROM push_jobs WHERE id = \(job)"
    }

    /// Each delivery in the slot of its first outcome (`created_at`), by its status now. One
    /// recorded a moment outside the job's span (a transaction's clock) is counted in the
    /// nearest slot rather than lost.
    static func countsStatement(job: Int64, slots: TimeSlots) -> PostgresQuery {
        """
        SELECT least(greatest(floor(extract(epoch FROM d.created_at - \(slots.start)::timestamptz) / \(slots.seconds)), 0),
                     \(slots.count - 1))::int,
               d.status, count(*)::int
          FROM push_deliveries d
         WHERE d.job_id = \(job) AND d.job_created_at = (SELECT created_at FROM push_jobs WHERE id = \(job))
         GROUP BY 1, 2
        """
    }
}
