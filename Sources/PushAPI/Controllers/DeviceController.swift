import DeviceRegistry
import Foundation
import Hummingbird
import Logging

/// `POST /push/devices`, `DELETE /push/devices/{id}`, `GET /push/devices`.
struct DeviceController {
    let registry: DeviceRegistry
    let deadline: DatabaseDeadline

    func addRoutes(to group: RouterGroup<APIRequestContext>) {
        group.post(use: register)
        group.get(use: list)
        group.delete(":id", use: deactivate)
    }

    struct RegisterBody: Decodable {
        let token: String?
        let platform: String?
        let deviceId: String?
        let tokenType: String?
    }

    struct DeviceBody: Encodable {
        let id: Int64
        let token: String
        let tokenType: String
        let platform: String
        let deviceId: String?
        let isActive: Bool
        let lastUsedAt: Date
        let createdAt: Date
        let deactivatedAt: Date?
        let deactivationReason: String?

        init(_ device: Device) {
            id = device.id
            token = device.token
            tokenType = device.tokenType.rawValue
            platform = device.platform.rawValue
            deviceId = device.deviceID
            isActive = device.isActive
            lastUsedAt = device.lastUsedAt
            createdAt = device.createdAt
            deactivatedAt = device.deactivatedAt
            deactivationReason = device.deactivationReason
        }

        enum CodingKeys: String, CodingKey {
            case id, token, tokenType, platform, deviceId, isActive, lastUsedAt, createdAt, deactivatedAt, deactivationReason
        }

        // deviceId is always present (null when unknown); the deactivation fields only on inactive rows.
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(id, forKey: .id)
            try container.encode(token, forKey: .token)
            try container.encode(tokenType, forKey: .tokenType)
            try container.encode(platform, forKey: .platform)
            try container.encode(deviceId, forKey: .deviceId)
            try container.encode(isActive, forKey: .isActive)
            try container.encode(lastUsedAt, forKey: .lastUsedAt)
            try container.encode(createdAt, forKey: .createdAt)
            try container.encodeIfPresent(deactivatedAt, forKey: .deactivatedAt)
            try container.encodeIfPresent(deactivationReason, forKey: .deactivationReason)
        }
    }

    struct DeviceList: Encodable {
        let devices: [DeviceBody]
    }

    @Sendable func register(_ request: Request, context: APIRequestContext) async throws -> Response {
        let user = try context.requireAppUser()
        let body = try await JSONBody.decode(RegisterBody.self, from: request, context: context)
        let registration: DeviceRegistration
        do {
            registration = try DeviceRegistration(
                token: body.token, platform: body.platform, deviceID: body.deviceId, tokenType: body.tokenType)
        } catch {
            throw APIError.validation(error.description)
        }
        let (registry, logger) = (self.registry, context.logger)
        let result = try await deadline.run {
            try await registry.register(registration, userID: user.userID, appID: user.appID, logger: logger)
        }
        context.logger.info("device registered", metadata: [
            "push.device_id": "\(result.device.id)",
            "push.platform": "\(registration.platform.rawValue)",
            "push.token": "\(maskedToken(registration.token))",
            "push.created": "\(result.created)",
        ])
        return JSONBody.response(DeviceBody(result.device), status: result.created ? .created : .ok)
    }

    @Sendable func list(_ request: Request, context: APIRequestContext) async throws -> Response {
        let user = try context.requireAppUser()
        let (registry, logger) = (self.registry, context.logger)
        let devices = try await deadline.run {
            try await registry.devices(appID: user.appID, userID: user.userID, logger: logger)
        }
        return JSONBody.response(DeviceList(devices: devices.map(DeviceBody.init)))
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
        context.logger.info("device deactivated", metadata: ["push.device_id": "\(id)", "push.reason": "logout"])
        return Response(status: .noContent)
    }
}
