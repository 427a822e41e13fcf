import DeviceRegistry
import Foundation
import NIOCore
import WireFormats

/// The console's CSV export of deliveries (``DeliveryCSV``'s lines), RFC 4180's CRLF line ends.
enum DeliveriesCSV {
    /// How much CSV is gathered before it is handed to the connection: large enough that a
    /// million rows are a few thousand writes, small enough to be the export's only buffer.
    static let chunkSize = 64 * 1024

    static func writeHeader(into buffer: inout ByteBuffer) {
        buffer.writeString(DeliveryCSV.header)
        buffer.writeStaticString("\r\n")
    }

    static func write(_ record: DeliveryRecord, into buffer: inout ByteBuffer) {
        buffer.writeString(DeliveryCSV.line(record))
        buffer.writeStaticString("\r\n")
    }
}
