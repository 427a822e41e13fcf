import DeviceRegistry
import Foundation
import Hummingbird
import Logging
import ServiceSupport
import WireFormats

/// `POST /push/devices`, `DELETE /push/devices/{id}`, `GET /push/devices`.
struct DeviceController {
    let registry: DeviceDirectory
    let registrations: RegistrationBatcher
    let deadline: DatabaseDeadline

    func addRoutes(to group: RouterGroup<APIRequestContext>) {
        group.post(use: register)
        group.get(use: list)
        group.delete(":id", use: deactivate)
    }

    /// A device as the API shows it. deviceId is always present (null when unknown); the
    /// deactivation fields only on inactive rows. Members in sorted order, as `WireJSON` writes.
    static func write(_ device: Device, to json: inout JSONWriter) {
        json.object { json in
            json.name("createdAt")
            json.value(device.createdAt)
            if let deactivatedAt = device.deactivatedAt {
                json.name("deactivatedAt")
                json.value(deactivatedAt)
            }
            if let reason = device.deactivationReason {
                json.name("deactivationReason")
                json.value(reason.rawValue)
            }
            json.name("deviceId")
            json.value(device.deviceID)
            json.name("id")
            json.value(device.id)
            json.name("isActive")
            json.value(device.isActive)
            json.name("lastUsedAt")
            json.value(device.lastUsedAt)
            json.name("platform")
            json.value(device.platform.rawValue)
            json.name("token")
            json.value(device.token)
            json.name("tokenType")
            json.value(device.tokenType.rawValue)
        }
    }

    static func body(_ device: Device) -> ByteBuffer {
        var json = JSONWriter()
        write(device, to: &json)
        return json.buffer
    }

    /// `{"devices": [...], "nextCursor": "123" | null}`: the list as before, plus the cursor.
    static func body(_ page: DeviceDirectory.Page) -> ByteBuffer {
        var json = JSONWriter(capacity: 128 + 768 * page.devices.count)
        json.object { json in
            json.name("devices")
            json.array(page.devices) { json, device in write(device, to: &json) }
            json.name("nextCursor")
            json.value(page.nextCursor.map(String.init))
        }
        return json.buffer
    }

    /// Devices per page of `GET /push/devices`: the default holds every active device a user
    /// can have (`MAX_ACTIVE_DEVICES_PER_USER` defaults to 20) with recent history; at the
    /// maximum a page of 500-character tokens stays near 150 KB.
    static let defaultPageSize: Int64 = 50
    static let pageSizes: ClosedRange<Int64> = 1...200

    /// The members of a registration body.
    enum RegistrationField: String, BodyField {
        case token, platform, deviceId, tokenType
    }

    @Sendable func register(_ request: Request, context: APIRequestContext) async throws -> Response {
        let user = try context.requireAppUser()
        let body = try await JSONBody.object(from: request, context: context, fields: RegistrationField.self)
        let registration: DeviceRegistration
        do {
            registration = try DeviceRegistration(
                token: try body.string(.token), platform: try body.string(.platform),
                deviceID: try body.string(.deviceId), tokenType: try body.string(.tokenType))
        } catch let error as DeviceValidationError {
            throw APIError.validation(error.description)
        }
        // The batcher keeps the database deadline itself.
        let result = try await registrations.register(registration, userID: user.userID, appID: user.appID,
                                                      logger: context.logger)
        context.logger.info("device registered", metadata: [
            "push.device_id": "\(result.device.id)",
            "push.platform": "\(registration.platform.rawValue)",
            "push.token": "\(maskedToken(registration.token))",
            "push.created": "\(result.created)",
        ])
        return JSONBody.response(Self.body(result.device), status: result.created ? .created : .ok)
    }

    @Sendable func list(_ request: Request, context: APIRequestContext) async throws -> Response {
        let user = try context.requireAppUser()
        let query = try QueryParameters(request, allowed: ["limit", "cursor"])
        let limit = try query.integer("limit", in: Self.pageSizes) ?? Self.defaultPageSize
        let cursor = try query.integer("cursor", in: 1...Int64.max, message: "cursor must be a nextCursor this endpoint returned")
        let (registry, logger) = (self.registry, context.logger)
        let page = try await deadline.run {
            try await registry.page(appID: user.appID, userID: user.userID, below: cursor, limit: Int(limit), logger: logger)
        }
        return JSONBody.response(Self.body(page))
    }

    @Sendable func deactivate(_ request: Request, context: APIRequestContext) async throws -> Response {
        let user = try context.requireAppUser()
        let raw = context.parameters.get("id") ?? ""
        guard let id = Int64(raw), id > 0 else {
            throw APIError.validation("device id must be a positive integer")
        }
        // Another user's device answers exactly like a missing one.
        let (registry, logger) = (self.registry, context.logger)
        let deactivated = try await deadline.run {
            try await registry.deactivate(deviceID: id, userID: user.userID, appID: user.appID, logger: logger)
        }
        guard deactivated else {
            throw APIError.notFound("device \(id) not found")
        }
        context.logger.info("device deactivated", metadata: ["push.device_id": "\(id)", "push.reason": "\(DeactivationReason.logout)"])
        return Response(status: .noContent)
    }
}
