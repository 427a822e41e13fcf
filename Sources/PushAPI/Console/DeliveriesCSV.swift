import DeviceRegistry
import Foundation
import NIOCore
import WireFormats

/// The console's CSV export of deliveries: the columns of `pushctl deliveries --format csv`,
/// RFC 4180 quoting, and no cell a spreadsheet would run as a formula.
enum DeliveriesCSV {
    /// How much CSV is gathered before it is handed to the connection: large enough that a
    /// million rows are a few thousand writes, small enough to be the export's only buffer.
    static let chunkSize = 64 * 1024

    static let columns = [
        "id", "job_id", "user_id", "app", "platform", "token", "status", "attempts", "updated_at", "error_code",
        "error_message", "fcm_message_id", "device_id", "created_at",
    ]

    static func writeHeader(into buffer: inout ByteBuffer) {
        writeLine(columns, into: &buffer)
    }

    static func write(_ record: DeliveryRecord, into buffer: inout ByteBuffer) {
        writeLine(
            [
                String(record.id), String(record.jobID), String(record.userID), record.appCode, record.platform.rawValue,
                record.maskedToken, record.status.rawValue, String(record.attempts), WireJSON.formatted(record.updatedAt),
                record.errorCode ?? "", record.errorMessage ?? "", record.fcmMessageID ?? "", String(record.deviceID),
                WireJSON.formatted(record.createdAt),
            ], into: &buffer)
    }

    private static func writeLine(_ cells: [String], into buffer: inout ByteBuffer) {
        for (index, cell) in cells.enumerated() {
            if index > 0 { buffer.writeStaticString(",") }
            buffer.writeString(field(cell))
        }
        buffer.writeStaticString("\r\n")
    }

    /// One cell. A text a spreadsheet would read as a formula (starting with `=`, `+`, `-`, `@`,
    /// or a tab or carriage return that some strip first) gets a leading `'`, which spreadsheets
    /// show as text; FCM's error messages and message ids are not ours to trust. Then RFC 4180:
    /// a cell holding a comma, quote, line break or that `'` is quoted, its quotes doubled.
    static func field(_ text: String) -> String {
        var cell = text
        if let first = cell.unicodeScalars.first, ["=", "+", "-", "@", "\t", "\r"].contains(first) { cell = "'" + cell }
        guard cell.unicodeScalars.contains(where: { ["\"", ",", "\n", "\r", "'"].contains($0) }) else { return cell }
        return "\"" + cell.replacingOccurrences(of: "\"", with: "\"\"") + "\""
    }
}
