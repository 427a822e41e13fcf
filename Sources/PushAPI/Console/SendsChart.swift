import DeviceRegistry

/// One slot of time's sends: deliveries whose first outcome was recorded in it, by status.
struct SendCounts: Sendable, Equatable {
    var sent = 0
    var failed = 0
    var skipped = 0
    /// Waiting for a retry.
    var pending = 0

    var total: Int { sent + failed + skipped + pending }

    mutating func add(_ status: DeliveryStatus, _ count: Int) {
        switch status {
        case .sent: sent += count
        case .failed: failed += count
        case .skipped: skipped += count
        case .pending: pending += count
        }
    }

    /// Every slot's counts added up.
    static func sum(_ slots: some Sequence<SendCounts>) -> SendCounts {
        slots.reduce(into: SendCounts()) { sum, slot in
            sum.sent += slot.sent
            sum.failed += slot.failed
            sum.skipped += slot.skipped
            sum.pending += slot.pending
        }
    }
}

/// A bar chart of sends over time as inline SVG, drawn on the server: one bar per slot of time,
/// its outcomes stacked, the oldest slot on the left. The overview draws an app's last 24 hours
/// with it, a job's page the job's span. It holds only numbers, times and fixed words, never user
/// text; colours come from the stylesheet's classes (the page's policy allows no inline style).
/// Its text alternative is its `<title>` and `<desc>` (the totals and the busiest slot), and each
/// bar's parts have a `<title>` of their own.
struct SendsChart {
    struct Bar: Sendable {
        /// When the bar's slot is, as its tooltip names it.
        let label: String
        let counts: SendCounts
    }

    /// A label under the bar at `bar`'s left edge.
    struct Tick: Sendable {
        let bar: Int
        let label: String
    }

    /// Unique on its page: the ids of the title and description the chart is labelled by.
    let id: String
    /// What the chart shows, e.g. `Sends of the last 24 hours by hour`.
    let title: String
    /// One bar's length of time: `hour`, `10 seconds`.
    let slot: String
    let bars: [Bar]
    let ticks: [Tick]
    /// The label at the right end of the time axis.
    let end: String

    static let width = 480
    static let height = 140
    /// Above the plot: the busiest slot's count, clear of the bars.
    private static let plotTop = 18
    private static let plotBottom = 118
    /// A bar is never wider, so that a job of a few slots is not drawn as a wall.
    private static let widestBar = 48.0

    /// The overview's chart: `hours[0]` is the hour ending now, `hours[23]` the one that began 24 hours ago.
    static func lastDay(_ hours: [SendCounts], id: String) -> SendsChart {
        SendsChart(
            id: id, title: "Sends of the last 24 hours by hour", slot: "hour",
            bars: hours.enumerated().reversed().map { hoursAgo, counts in
                Bar(label: hoursAgo == 0 ? "the last hour" : "\(hoursAgo + 1) to \(hoursAgo) h ago", counts: counts)
            },
            ticks: [
                Tick(bar: 0, label: "-24 h"), Tick(bar: 6, label: "-18 h"), Tick(bar: 12, label: "-12 h"), Tick(bar: 18, label: "-6 h"),
            ],
            end: "now")
    }

    var svg: String {
        let totals = SendCounts.sum(bars.map(\.counts))
        let peak = bars.map(\.counts.total).max() ?? 0
        let width = Double(Self.width)
        let slotWidth = width / Double(max(bars.count, 1))
        let plotHeight = Double(Self.plotBottom - Self.plotTop)
        var svg = """
            <svg class="chart" viewBox="0 0 \(Self.width) \(Self.height)" role="img" aria-labelledby="\(id)-title \(id)-desc">\
            <title id="\(id)-title">\(title)</title><desc id="\(id)-desc">sent \(totals.sent), failed \(totals.failed), \
            skipped \(totals.skipped), waiting to retry \(totals.pending); busiest \(slot) \(peak)</desc>
            <line class="axis" x1="0" y1="\(Self.plotBottom)" x2="\(Self.width)" y2="\(Self.plotBottom)"/>
            """
        let barWidth = min(max(slotWidth - 2, 1), Self.widestBar)
        for (index, bar) in bars.enumerated() {
            let x = Double(index) * slotWidth + (slotWidth - barWidth) / 2
            var base = Double(Self.plotBottom)
            let counts = bar.counts
            for (value, kind) in [
                (counts.sent, "sent"), (counts.failed, "failed"), (counts.skipped, "skipped"), (counts.pending, "pending"),
            ]
            where value > 0 {
                let barHeight = max(plotHeight * Double(value) / Double(peak), 1)
                base -= barHeight
                svg +=
                    "<rect class=\"\(kind)\" x=\"\(Self.format(x))\" y=\"\(Self.format(base))\" width=\"\(Self.format(barWidth))\" height=\"\(Self.format(barHeight))\"><title>\(bar.label): \(value) \(kind)</title></rect>"
            }
        }
        for tick in ticks {
            svg += "<text x=\"\(Self.format(Double(tick.bar) * slotWidth + 1))\" y=\"\(Self.height - 6)\">\(tick.label)</text>"
        }
        svg +=
            "<text x=\"\(Self.width - 1)\" y=\"\(Self.height - 6)\" text-anchor=\"end\">\(end)</text><text x=\"\(Self.width - 1)\" y=\"\(Self.plotTop - 6)\" text-anchor=\"end\">\(peak) per \(slot)</text></svg>"
        return svg
    }

    private static func format(_ value: Double) -> String {
        String(Double((value * 10).rounded()) / 10)
    }
}
