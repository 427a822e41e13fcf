import DeviceRegistry

/// One hour of an app's sends: deliveries whose first outcome was recorded in that hour, by status.
struct HourlySends: Sendable, Equatable {
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
}

/// The overview's bar chart as inline SVG, drawn on the server: 24 stacked bars, oldest hour on
/// the left. It holds only numbers and fixed words, never user text; colours come from the
/// stylesheet's classes (the page's policy allows no inline style).
enum SendsChart {
    static let width = 480
    static let height = 140
    private static let plotTop = 8
    private static let plotBottom = 118

    /// `hours[0]` is the hour ending now, `hours[23]` the one that began 24 hours ago.
    static func svg(hours: [HourlySends]) -> String {
        let totals = hours.reduce(into: HourlySends()) { sum, hour in
            sum.sent += hour.sent
            sum.failed += hour.failed
            sum.skipped += hour.skipped
            sum.pending += hour.pending
        }
        let peak = max(hours.map(\.total).max() ?? 0, 1)
        let slot = Double(width) / Double(max(hours.count, 1))
        let plotHeight = Double(plotBottom - plotTop)
        var svg = """
            <svg class="chart" viewBox="0 0 \(width) \(height)" role="img" aria-label="Sends of the last 24 hours by hour: \
            sent \(totals.sent), failed \(totals.failed), skipped \(totals.skipped), waiting to retry \(totals.pending); \
            busiest hour \(peak == 1 && totals.total == 0 ? 0 : peak)">
            <line class="axis" x1="0" y1="\(plotBottom)" x2="\(width)" y2="\(plotBottom)"/>
            """
        for (index, hour) in hours.reversed().enumerated() {
            let x = Double(index) * slot + 1
            var base = Double(plotBottom)
            for (value, kind) in [(hour.sent, "sent"), (hour.failed, "failed"), (hour.skipped, "skipped"), (hour.pending, "pending")]
            where value > 0 {
                let barHeight = max(plotHeight * Double(value) / Double(peak), 1)
                base -= barHeight
                svg +=
                    "<rect class=\"\(kind)\" x=\"\(format(x))\" y=\"\(format(base))\" width=\"\(format(slot - 2))\" height=\"\(format(barHeight))\"><title>\(value) \(kind)</title></rect>"
            }
        }
        for (label, index) in [("-24 h", 0), ("-18 h", 6), ("-12 h", 12), ("-6 h", 18)] {
            svg += "<text x=\"\(format(Double(index) * slot + 1))\" y=\"\(height - 6)\">\(label)</text>"
        }
        svg +=
            "<text x=\"\(width - 24)\" y=\"\(height - 6)\">now</text><text x=\"\(width - 4)\" y=\"\(plotTop + 8)\" text-anchor=\"end\">\(totals.total == 0 ? 0 : peak)/h</text></svg>"
        return svg
    }

    private static func format(_ value: Double) -> String {
        String(Double((value * 10).rounded()) / 10)
    }
}
