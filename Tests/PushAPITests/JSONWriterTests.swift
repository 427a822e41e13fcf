@testable import DeviceRegistry
import Foundation
@testable import PushAPI
import Testing
import WireFormats

@Suite("Device responses written by hand")
struct JSONWriterTests {
    /// The contract's device shape through `JSONEncoder`: what the hand-written bytes must equal.
    struct EncodedDevice: Encodable {
        let device: Device

        enum Keys: String, CodingKey {
            case id, token, tokenType, platform, deviceId, isActive, lastUsedAt, createdAt, deactivatedAt, deactivationReason
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: Keys.self)
            try container.encode(device.id, forKey: .id)
            try container.encode(device.token, forKey: .token)
            try container.encode(device.tokenType.rawValue, forKey: .tokenType)
            try container.encode(device.platform.rawValue, forKey: .platform)
            try container.encode(device.deviceID, forKey: .deviceId)
            try container.encode(device.isActive, forKey: .isActive)
            try container.encode(device.lastUsedAt, forKey: .lastUsedAt)
            try container.encode(device.createdAt, forKey: .createdAt)
            try container.encodeIfPresent(device.deactivatedAt, forKey: .deactivatedAt)
            try container.encodeIfPresent(device.deactivationReason, forKey: .deactivationReason)
        }
    }

    struct EncodedList: Encodable {
        let devices: [EncodedDevice]
        let nextCursor: String?

        enum CodingKeys: String, CodingKey { case devices, nextCursor }

        /// nextCursor is always written, null on the last page.
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(devices, forKey: .devices)
            try container.encode(nextCursor, forKey: .nextCursor)
        }
    }

    static func device(id: Int64, token: String, deviceID: String?, active: Bool) -> Device {
        Device(id: id, userID: 1, appID: 2, token: token, tokenType: id % 2 == 0 ? .fcm : .fid, platform: .android,
               deviceID: deviceID, isActive: active, lastUsedAt: Date(timeIntervalSince1970: 1_763_758_773.388_123),
               createdAt: Date(timeIntervalSince1970: 1_700_000_000.000_999),
               deactivatedAt: active ? nil : Date(timeIntervalSince1970: 1_763_758_800.5), deactivationReason: active ? nil : .accountSwitch)
    }

    @Test func bytesEqualTheEncoders() throws {
        let everyASCII = String(decoding: (0..<128).map { UInt8($0) }, as: UTF8.self)
        let devices = [
            Self.device(id: 1, token: "fcm:APA91b/x_y-z", deviceID: nil, active: true),
            Self.device(id: Int64.max, token: "t\"\\/é😀\u{301}\"\u{301}", deviceID: everyASCII, active: false),
            Self.device(id: 3, token: "\u{2028}\u{7F}", deviceID: "Pixel \"8\" 🙂", active: true),
        ]
        let encoder = WireJSON.makeEncoder()
        for device in devices {
            let expected = String(decoding: try encoder.encode(EncodedDevice(device: device)), as: UTF8.self)
            #expect(String(buffer: DeviceController.body(device)) == expected)
        }
        let expectedList = String(decoding: try encoder.encode(EncodedList(devices: devices.map(EncodedDevice.init), nextCursor: "3")), as: UTF8.self)
        #expect(String(buffer: DeviceController.body(DeviceDirectory.Page(devices: devices, nextCursor: 3))) == expectedList)
        #expect(String(buffer: DeviceController.body(DeviceDirectory.Page(devices: [], nextCursor: nil))) == #"{"devices":[],"nextCursor":null}"#)
    }

    @Test func datesAreUTCWithTheStoredMilliseconds() {
        var random = SystemRandomNumberGenerator()
        let whole = Date.ISO8601FormatStyle(timeZone: .gmt)
        for _ in 0..<20_000 {
            // A time as PostgreSQL stores it: whole microseconds, 1970 to 2100.
            let microseconds = Int64.random(in: 0..<4_102_444_800_000_000, using: &random)
            let date = Date(timeIntervalSince1970: Double(microseconds) / 1_000_000)
            let seconds = Date(timeIntervalSince1970: Double(microseconds / 1_000_000))
            var expected = seconds.formatted(whole)
            expected.removeLast()   // the "Z"
            let millisecond = microseconds / 1000 % 1000
            expected += "." + String(repeating: "0", count: 3 - String(millisecond).count) + String(millisecond) + "Z"
            #expect(WireJSON.formatted(date) == expected)
        }
        #expect(WireJSON.formatted(Date(timeIntervalSince1970: 1_763_758_773.388)) == "2025-11-21T20:59:33.388Z")
        #expect(WireJSON.formatted(Date(timeIntervalSince1970: -0.001)) == "1969-12-31T23:59:59.999Z")
        #expect(WireJSON.formatted(Date(timeIntervalSince1970: 951_782_400)) == "2000-02-29T00:00:00.000Z")
    }
}
