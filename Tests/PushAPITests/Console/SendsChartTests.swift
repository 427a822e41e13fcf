import Testing

@testable import PushAPI

@Suite("Console sends chart")
struct SendsChartTests {
    @Test func barsStackEachHoursOutcomesOldestHourFirst() {
        var hours = [SendCounts](repeating: SendCounts(), count: 24)
        hours[0] = SendCounts(sent: 10, failed: 2, skipped: 0, pending: 1)
        hours[23] = SendCounts(sent: 5)
        let svg = SendsChart.lastDay(hours, id: "sends-7").svg
        #expect(
            svg.hasPrefix(#"<svg class="chart" viewBox="0 0 480 140" role="img" aria-labelledby="sends-7-title sends-7-desc">"#)
                && svg.hasSuffix("</svg>"))
        #expect(svg.contains(#"<title id="sends-7-title">Sends of the last 24 hours by hour</title>"#))
        #expect(svg.contains(#"<desc id="sends-7-desc">sent 15, failed 2, skipped 0, waiting to retry 1; busiest hour 13</desc>"#))
        #expect(svg.matches(of: /<rect class="sent"/).count == 2)
        #expect(svg.matches(of: /<rect class="failed"/).count == 1 && svg.matches(of: /<rect class="pending"/).count == 1)
        #expect(!svg.contains("<rect class=\"skipped\""))
        // The oldest hour is drawn first, at the left; the busiest hour's bar is the plot's full height.
        let first = svg.firstMatch(of: /<rect class="sent" x="([0-9.]+)" y="([0-9.]+)" width="[0-9.]+" height="([0-9.]+)"><title>([^<]+)</)
        #expect(first?.1 == "1.0" && first?.4 == "24 to 23 h ago: 5 sent")
        #expect(svg.contains("<title>the last hour: 10 sent</title>") && svg.contains(">13 per hour<"))
        #expect(svg.contains(">-24 h<") && svg.contains(">now<"))
        #expect(!svg.contains("style"), "the page's policy allows no inline style")
    }

    @Test func anEmptyDayDrawsOnlyTheAxis() {
        let svg = SendsChart.lastDay([SendCounts](repeating: SendCounts(), count: 24), id: "sends-1").svg
        #expect(!svg.contains("<rect"))
        #expect(svg.contains("sent 0, failed 0, skipped 0, waiting to retry 0; busiest hour 0") && svg.contains(">0 per hour<"))
    }

    @Test func aBarsPartsAreProportionalToTheBusiestSlot() {
        let chart = SendsChart(
            id: "c", title: "t", slot: "10 seconds",
            bars: [
                .init(label: "a", counts: SendCounts(sent: 30, failed: 10)), .init(label: "b", counts: SendCounts(skipped: 20)),
            ],
            ticks: [.init(bar: 1, label: "14:00:10")], end: "14:00:20")
        let svg = chart.svg
        // The plot is 100 high: the busiest bar (40) fills it, the other's 20 is half of it. Each of
        // the two slots is 240 wide; a bar is at most 48, in the middle of its slot.
        #expect(svg.contains(#"<rect class="sent" x="96.0" y="43.0" width="48.0" height="75.0"><title>a: 30 sent</title></rect>"#))
        #expect(svg.contains(#"<rect class="failed" x="96.0" y="18.0" width="48.0" height="25.0"><title>a: 10 failed</title></rect>"#))
        #expect(svg.contains(#"<rect class="skipped" x="336.0" y="68.0" width="48.0" height="50.0"><title>b: 20 skipped</title></rect>"#))
        #expect(svg.contains(#"<text x="241.0" y="134">14:00:10</text>"#) && svg.contains(">14:00:20</text>"))
        #expect(svg.contains("busiest 10 seconds 40") && svg.contains(">40 per 10 seconds<"))
    }
}
