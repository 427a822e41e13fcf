import Foundation
import WireFormats

/// Deliveries as CSV, one way for every surface (`pushctl deliveries --format csv`, the
/// console's export): the columns, RFC 4180 quoting, and no cell a spreadsheet would run as a
/// formula.
public enum DeliveryCSV {
    public static let columns = [
        "id", "job_id", "user_id", "app", "platform", "token", "status", "attempts", "updated_at", "error_code",
        "error_message", "fcm_message_id", "device_id", "created_at", "dry_run",
    ]

    /// The header line, without its line end.
    public static var header: String { line(columns) }

    /// One delivery's line, without its line end.
    public static func line(_ record: DeliveryRecord) -> String {
        line([
            String(record.id), String(record.jobID), String(record.userID), record.appCode, record.platform.rawValue,
            record.maskedToken, record.status.rawValue, String(record.attempts), WireJSON.formatted(record.updatedAt),
            record.errorCode ?? "", record.errorMessage ?? "", record.fcmMessageID ?? "", String(record.deviceID),
            WireJSON.formatted(record.createdAt), String(record.dryRun),
        ])
    }

    static func line(_ cells: [String]) -> String {
        cells.map(field).joined(separator: ",")
    }

    /// One cell. A text a spreadsheet would read as a formula (starting with `=`, `+`, `-`, `@`,
    /// or a tab or carriage return that some strip first) gets a leading `'`, which spreadsheets
    /// show as text; FCM's error messages and message ids are not ours to trust. Then RFC 4180:
    /// a cell holding a comma, quote, line break or that `'` is quoted, its quotes doubled.
    public static func field(_ text: String) -> String {
        var cell = text
        if let first = cell.unicodeScalars.first, ["=", "+", "-", "@", "\t", "\r"].contains(first) { cell = "'" + cell }
        guard cell.unicodeScalars.contains(where: { ["\"", ",", "\n", "\r", "'"].contains($0) }) else { return cell }
        return "\"" + cell.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}
