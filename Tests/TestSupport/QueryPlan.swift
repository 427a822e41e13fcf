import Foundation

/// Reading EXPLAIN's text.
public enum QueryPlan {
    /// The plan's sequential scans that read something: a scan whose total cost is under one page
    /// (`seq_page_cost`) is of an empty relation, as the delivery log's partitions of the days
    /// ahead are. A scan without costs shown counts.
    public static func sequentialScansWithPages(in plan: String) -> [String] {
        plan.split(separator: "\n").map(String.init).filter { line in
            guard line.contains("Seq Scan on ") else { return false }
            guard let cost = line.range(of: #"cost=[0-9.]+\.\.[0-9.]+"#, options: .regularExpression) else { return true }
            return (Double(line[cost].components(separatedBy: "..").last ?? "") ?? .infinity) >= 1
        }
    }

    /// The most rows any one scan of a relation named `prefix`… read in an `EXPLAIN ANALYZE` plan:
    /// the rows it returned and those its filter removed, over all its loops (EXPLAIN shows both
    /// per loop).
    public static func largestScan(of prefix: String, in plan: String) -> Int {
        var largest = 0
        var current: (rows: Int, loops: Int, removed: Int)?
        func close() {
            if let scan = current { largest = max(largest, (scan.rows + scan.removed) * scan.loops) }
            current = nil
        }
        for line in plan.split(separator: "\n").map(String.init) {
            if line.contains("->") || line.contains("(actual") {
                close()
                guard line.contains(" on \(prefix)"),
                    let actual = line.range(of: #"actual rows=[0-9]+ loops=[0-9]+"#, options: .regularExpression)
                else { continue }
                let numbers = line[actual].split(whereSeparator: { !$0.isNumber }).compactMap { Int($0) }
                current = (numbers[0], numbers[1], 0)
            } else if current != nil, let removed = line.range(of: #"Rows Removed by [A-Za-z ]+: [0-9]+"#, options: .regularExpression) {
                current?.removed += Int(line[removed].split(separator: " ").last ?? "") ?? 0
            }
        }
        close()
        return largest
    }
}
