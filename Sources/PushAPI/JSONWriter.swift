import DeviceRegistry
import Foundation
import NIOCore
import WireFormats

/// Writes a response's JSON straight into a buffer, byte for byte as `WireJSON`'s encoder would
/// (members in sorted order, slashes unescaped, dates as `WireJSON.formatted`). For the device
/// endpoints, answered on every login: `JSONEncoder` cost about 4% of a registration's CPU.
/// Callers write members in sorted order themselves; a test holds them to the encoder's output.
struct JSONWriter {
    private(set) var buffer: ByteBuffer
    /// Whether the container being written has no member or element yet.
    private var empty = true

    init(capacity: Int = 512) {
        buffer = ByteBufferAllocator().buffer(capacity: capacity)
    }

    mutating func object(_ members: (inout JSONWriter) -> Void) {
        separate()
        buffer.writeStaticString("{")
        empty = true
        members(&self)
        buffer.writeStaticString("}")
        empty = false
    }

    mutating func array<Element>(_ elements: some Sequence<Element>, _ write: (inout JSONWriter, Element) -> Void) {
        separate()
        buffer.writeStaticString("[")
        empty = true
        for element in elements { write(&self, element) }
        buffer.writeStaticString("]")
        empty = false
    }

    /// Writes the member's name; the value written next belongs to it.
    mutating func name(_ name: StaticString) {
        separate()
        buffer.writeStaticString("\"")
        buffer.writeStaticString(name)
        buffer.writeStaticString("\":")
        empty = true
    }

    mutating func value(_ value: String?) {
        separate()
        guard let value else {
            buffer.writeStaticString("null")
            return
        }
        buffer.writeStaticString("\"")
        var text = value
        text.withUTF8 { bytes in
            // Runs without anything to escape are copied whole; escapes are ASCII, so the
            // runs never split a character's bytes.
            var run = 0
            for (offset, byte) in bytes.enumerated() where byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") {
                buffer.writeBytes(UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: bytes[run..<offset])))
                switch byte {
                case UInt8(ascii: "\""): buffer.writeStaticString("\\\"")
                case UInt8(ascii: "\\"): buffer.writeStaticString("\\\\")
                case 0x08: buffer.writeStaticString("\\b")
                case 0x0C: buffer.writeStaticString("\\f")
                case 0x0A: buffer.writeStaticString("\\n")
                case 0x0D: buffer.writeStaticString("\\r")
                case 0x09: buffer.writeStaticString("\\t")
                default:
                    buffer.writeStaticString("\\u00")
                    buffer.writeInteger(Self.hexDigits[Int(byte >> 4)])
                    buffer.writeInteger(Self.hexDigits[Int(byte & 0xF)])
                }
                run = offset + 1
            }
            buffer.writeBytes(UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: bytes[run...])))
        }
        buffer.writeStaticString("\"")
    }

    mutating func value(_ value: Int64) {
        separate()
        buffer.writeString(String(value))
    }

    mutating func value(_ value: Bool) {
        separate()
        buffer.writeStaticString(value ? "true" : "false")
    }

    mutating func value(_ value: Date) {
        self.value(WireJSON.formatted(value))
    }

    private mutating func separate() {
        if !empty { buffer.writeStaticString(",") }
        empty = false
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)
}
