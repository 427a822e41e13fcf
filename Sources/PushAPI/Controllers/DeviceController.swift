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
        let result = try await registrations.register(
            registration, userID: user.userID, appID: user.appID,
            logger: context.logger)
        context.logger.info(
            "device registered",
            metadata: [
                "push.device_id": "\(result.device.id)",
                "push.platform": "\(registration.platform.rawValue)",
                "push.token": "\(maskedToken(registration.token))",
                "push.created": "\(result.created)",
            ])
        return JSONBody.response(DeviceResponse(result.device), status: result.created ? .created : .ok)
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
        return JSONBody.response(DevicePageResponse(page))
    }

    @Sendable func deactivate(_ request: Request, context: APIRequestContext) async throws -> Response {
        let user = try context.requireAppUser()
        let raw = context.parameters.get("id") ?? ""
        guard let id = Int64(plainDecimal: raw), id > 0 else {
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

/// A device as the API shows it: deviceId always present (null when unknown), the deactivation
/// fields only on inactive rows.
struct DeviceResponse: Encodable {
    let device: Device

    init(_ device: Device) {
        self.device = device
    }

    private enum Keys: String, CodingKey {
        case id, token, tokenType, platform, deviceId, isActive, lastUsedAt, createdAt, deactivatedAt, deactivationReason
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Keys.self)
        try container.encode(device.id, forKey: .id)
        try container.encode(device.token, forKey: .token)
        try container.encode(device.tokenType, forKey: .tokenType)
        try container.encode(device.platform, forKey: .platform)
        try container.encode(device.deviceID, forKey: .deviceId)
        try container.encode(device.isActive, forKey: .isActive)
        try container.encode(device.lastUsedAt, forKey: .lastUsedAt)
        try container.encode(device.createdAt, forKey: .createdAt)
        try container.encodeIfPresent(device.deactivatedAt, forKey: .deactivatedAt)
        try container.encodeIfPresent(device.deactivationReason, forKey: .deactivationReason)
    }
}

/// `{"devices": [...], "nextCursor": "123" | null}`: nextCursor always written, null on the last page.
struct DevicePageResponse: Encodable {
    let devices: [DeviceResponse]
    let nextCursor: String?

    init(_ page: DeviceDirectory.Page) {
        devices = page.devices.map(DeviceResponse.init)
        nextCursor = page.nextCursor.map(String.init)
    }

    private enum CodingKeys: String, CodingKey { case devices, nextCursor }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(devices, forKey: .devices)
        try container.encode(nextCursor, forKey: .nextCursor)
    }
}
