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
}
