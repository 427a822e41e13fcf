import Foundation
import Testing

@testable import DeviceRegistry
@testable import PushAPI

@Suite("Device responses as the contract shows them")
struct DeviceResponseTests {
    static func device(id: Int64, token: String, deviceID: String?, active: Bool) -> Device {
        Device(
            id: id, userID: 1, appID: 2, token: token, tokenType: id % 2 == 0 ? .fcm : .fid, platform: .android,
            deviceID: deviceID, isActive: active, lastUsedAt: Date(timeIntervalSince1970: 1_763_758_773.388_123),
            createdAt: Date(timeIntervalSince1970: 1_700_000_000.000_999),
            deactivatedAt: active ? nil : Date(timeIntervalSince1970: 1_763_758_800.5), deactivationReason: active ? nil : .accountSwitch)
    }

    static let active = device(id: 1, token: "fcm:APA91b/x_y-z", deviceID: nil, active: true)
    static let inactive = device(id: Int64.max, token: "t\"\\/é😀\u{1}", deviceID: "Pixel \"8\"", active: false)

    /// Members in sorted order, slashes unescaped, deviceId null when unknown, the deactivation
    /// fields on inactive rows only.
    @Test func bytes() {
        #expect(
            String(buffer: JSONBody.encode(DeviceResponse(Self.active)))
                == #"{"createdAt":"2023-11-14T22:13:20.000Z","deviceId":null,"id":1,"isActive":true,"lastUsedAt":"2025-11-21T20:59:33.388Z","platform":"android","token":"fcm:APA91b/x_y-z","tokenType":"fid"}"#
        )
        #expect(
            String(buffer: JSONBody.encode(DeviceResponse(Self.inactive)))
                == #"{"createdAt":"2023-11-14T22:13:20.000Z","deactivatedAt":"2025-11-21T21:00:00.500Z","deactivationReason":"account_switch","deviceId":"Pixel \"8\"","id":9223372036854775807,"isActive":false,"lastUsedAt":"2025-11-21T20:59:33.388Z","platform":"android","token":"t\"\\/é😀\u0001","tokenType":"fid"}"#
        )
    }

    @Test func pageBytes() {
        let page = DevicePageResponse(DeviceDirectory.Page(devices: [Self.active], nextCursor: 3))
        #expect(
            String(buffer: JSONBody.encode(page))
                == #"{"devices":[{"createdAt":"2023-11-14T22:13:20.000Z","deviceId":null,"id":1,"isActive":true,"lastUsedAt":"2025-11-21T20:59:33.388Z","platform":"android","token":"fcm:APA91b/x_y-z","tokenType":"fid"}],"nextCursor":"3"}"#
        )
        #expect(
            String(buffer: JSONBody.encode(DevicePageResponse(DeviceDirectory.Page(devices: [], nextCursor: nil))))
                == #"{"devices":[],"nextCursor":null}"#)
    }
}
