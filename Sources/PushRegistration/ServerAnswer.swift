import Foundation

/// How push-api's HTTP answers read, without I/O: success, try again later, a refused access
/// token, or a refusal that sending again cannot fix.
enum ServerAnswer {
    /// `POST /push/devices`: 200 or 201 with the device, whose `id` is kept for the logout.
    static func registration(status: Int, body: Data, retryAfter: String?, now: Date) -> Answer<Int64> {
        switch status {
        case 200, 201:
            struct Row: Decodable { let id: Int64 }
            // The row is written but its id unreadable: registering again is idempotent and
            // answers it again.
            guard let row = try? JSONDecoder().decode(Row.self, from: body) else {
                return .retry(after: nil, reason: "HTTP \(status) without a readable device id")
            }
            return .success(row.id)
        default:
            return failure(status: status, body: body, retryAfter: retryAfter, now: now)
        }
    }

    /// `DELETE /push/devices/{id}`: 204 deactivated (or already inactive), 404 not this
    /// account's device: either way nothing of the account stays active on that row.
    static func deactivation(row: Int64, status: Int, body: Data, retryAfter: String?, now: Date) -> Answer<Deactivated> {
        switch status {
        case 200..<300: return .success(.device(row))
        case 404: return .success(.nothingActive)
        default: return failure(status: status, body: body, retryAfter: retryAfter, now: now)
        }
    }

    /// `GET /push/devices`: one page of the account's devices.
    static func devicePage(status: Int, body: Data, retryAfter: String?, now: Date) -> Answer<DevicePage> {
        guard status == 200 else { return failure(status: status, body: body, retryAfter: retryAfter, now: now) }
        guard let page = try? DevicePage.decoder.decode(DevicePage.self, from: body) else {
            return .refused(reason: "HTTP 200 with an unreadable device list")
        }
        return .success(page)
    }

    /// Any answer that is not the call's success.
    static func failure<Success>(status: Int, body: Data, retryAfter: String?, now: Date) -> Answer<Success> {
        switch status {
        case 401: return .unauthorized
        case 408, 429, 500..<600: return .retry(after: Self.retryAfter(retryAfter, now: now), reason: reason(status: status, body: body))
        default: return .refused(reason: reason(status: status, body: body))
        }
    }

    /// `Retry-After` as whole seconds or an HTTP date (RFC 9110); nil when absent or unreadable.
    static func retryAfter(_ header: String?, now: Date) -> Duration? {
        guard let header = header?.trimmingCharacters(in: .whitespaces), !header.isEmpty else { return nil }
        if let seconds = Int(header) { return seconds >= 0 ? .seconds(seconds) : nil }
        let format = DateFormatter()
        format.locale = Locale(identifier: "en_US_POSIX")
        format.timeZone = TimeZone(identifier: "GMT")
        format.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        guard let date = format.date(from: header) else { return nil }
        return .milliseconds(Int64(max(0, date.timeIntervalSince(now)) * 1000))
    }

    /// "HTTP 400 VALIDATION_FAILED: token must be 1 to 500 characters", from push-api's error
    /// envelope when there is one.
    static func reason(status: Int, body: Data) -> String {
        struct Envelope: Decodable {
            let code: String
            let message: String
        }
        guard let envelope = try? JSONDecoder().decode(Envelope.self, from: body) else { return "HTTP \(status)" }
        return "HTTP \(status) \(envelope.code): \(envelope.message)"
    }
}

/// One page of `GET /push/devices`.
struct DevicePage: Decodable, Sendable, Equatable {
    let devices: [RegisteredDevice.Wire]
    let nextCursor: String?

    /// push-api's timestamps: ISO 8601 with milliseconds.
    static var decoder: JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let text = try decoder.singleValueContainer().decode(String.self)
            let format = ISO8601DateFormatter()
            format.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            if let date = format.date(from: text) { return date }
            format.formatOptions = [.withInternetDateTime]
            guard let date = format.date(from: text) else {
                throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not an ISO 8601 time: \(text)"))
            }
            return date
        }
        return decoder
    }
}
