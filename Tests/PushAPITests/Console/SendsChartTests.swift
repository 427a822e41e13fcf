import Testing

@testable import PushAPI

@Suite("Console sends chart")
struct SendsChartTests {
    @Test func barsStackEachHoursOutcomesOldestHourFirst() {
        var hours = [HourlySends](repeating: HourlySends(), count: 24)
        hours[0] = HourlySends(sent: 10, failed: 2, skipped: 0, pending: 1)
        hours[23] = HourlySends(sent: 5)
        let svg = SendsChart.svg(hours: hours)
        #expect(svg.hasPrefix(#"<svg class="chart" viewBox="0 0 480 140" role="img""#) && svg.hasSuffix("</svg>"))
        #expect(svg.contains("sent 15, failed 2, skipped 0, waiting to retry 1; busiest hour 13"))
        #expect(svg.matches(of: /<rect class="sent"/).count == 2)
        #expect(svg.matches(of: /<rect class="failed"/).count == 1 && svg.matches(of: /<rect class="pending"/).count == 1)
        #expect(!svg.contains("<rect class=\"skipped\""))
        // The oldest hour is drawn first, at the left; the busiest hour's bar is the plot's full height.
        let first = svg.firstMatch(of: /<rect class="sent" x="([0-9.]+)" y="([0-9.]+)" width="[0-9.]+" height="([0-9.]+)"><title>5 sent/)
        #expect(first?.1 == "1.0")
        #expect(svg.contains("<title>10 sent</title>") && svg.contains("13/h"))
        #expect(!svg.contains("style"), "the page's policy allows no inline style")
    }

    @Test func anEmptyDayDrawsOnlyTheAxis() {
        let svg = SendsChart.svg(hours: [HourlySends](repeating: HourlySends(), count: 24))
        #expect(!svg.contains("<rect"))
        #expect(svg.contains("sent 0, failed 0, skipped 0, waiting to retry 0; busiest hour 0") && svg.contains(">0/h<"))
    }
}
