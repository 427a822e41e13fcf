import Foundation
import NIOCore
import WireFormats

/// Where a send goes: exactly one of FCM's target fields.
enum MessageTarget: Sendable, Equatable {
    case token(String)
    case fid(String)
    case topic(String)
    case condition(String)

    /// The key the emulator scripts outcomes and counts sends by; topics and conditions have none.
    var deviceToken: String? {
        switch self {
        case .token(let token), .fid(let token): token
        case .topic, .condition: nil
        }
    }
}

/// A send request body that passed validation.
struct SendRequest: Sendable, Equatable {
    var target: MessageTarget
    var validateOnly: Bool
}

/// Why a send body is refused (400 INVALID_ARGUMENT); `field` names the offending part as FCM's
/// `google.rpc.BadRequest` does.
struct PayloadViolation: Error, Equatable {
    var message: String
    var field: String
    var description: String
    /// Whether the answer carries an FcmError detail. Google's API front end refuses a body it
    /// cannot decode into a Message (not JSON, unknown names, wrong types, two targets, too big)
    /// with a BadRequest detail only; FCM itself adds its FcmError.
    var fromFCM: Bool
    /// A `token` (or `fid`) FCM cannot deliver to: answered with the invalid-registration-token file.
    var isInvalidRegistrationToken = false

    init(_ message: String, field: String, description: String? = nil, fromFCM: Bool = false) {
        self.message = message
        self.field = field
        self.description = description ?? message
        self.fromFCM = fromFCM
    }

    /// A `token` (or `fid`) FCM cannot deliver to; `field` is `message.token` or `message.fid`.
    static func invalidRegistrationToken(field: String) -> PayloadViolation {
        var violation = PayloadViolation("The registration token is not a valid FCM registration token", field: field, fromFCM: true)
        violation.isInvalidRegistrationToken = true
        return violation
    }
}

/// Validates `{"message": {...}, "validate_only": bool}` the way FCM HTTP v1 does, for the rules fcm-protocol.md
/// §2 lists: one target, no unknown fields, string-to-string data without reserved keys, 4096-byte payloads.
/// As in every Google JSON API, a field may be named in snake_case or in lowerCamelCase (`fcm_options`, `fcmOptions`).
enum MessageValidator {
    static let messageSizeLimit = 4096
    static let targetFields = ["token", "topic", "condition", "fid"]
    static let messageFields: Set<String> = [
        "name", "data", "notification", "android", "webpush", "apns", "fcm_options", "token", "topic", "condition", "fid",
    ]
    static let notificationFields: Set<String> = ["title", "body", "image"]
    /// The fields of the platform objects (AndroidConfig, ApnsConfig, WebpushConfig, FcmOptions),
    /// in the order they are checked; what lies deeper (their notifications, the APNs payload) is not.
    static let objectFields: [(name: String, fields: Set<String>)] = [
        (
            "android",
            [
                "collapse_key", "priority", "ttl", "restricted_package_name", "data", "notification", "fcm_options",
                "direct_boot_ok", "bandwidth_constrained_ok", "restricted_satellite_ok",
            ]
        ),
        ("apns", ["headers", "payload", "fcm_options", "live_activity_token"]),
        ("fcm_options", ["analytics_label"]),
        ("webpush", ["headers", "data", "notification", "fcm_options"]),
    ]

    static func validate(_ body: ByteBuffer) throws(PayloadViolation) -> SendRequest {
        guard let decoded = body.withUnsafeReadableBytes({ try? JSONParser.parse($0) })?.members else {
            throw PayloadViolation("Invalid JSON payload received. Expected a JSON object.", field: "")
        }
        let root = try fieldsBySnakeCaseName(decoded, allowed: ["message", "validate_only"], at: nil)
        let validateOnly = try validateOnlyFlag(root["validate_only"])
        guard let object = root["message"]?.members else {
            throw PayloadViolation("Invalid value at 'message': the message must be a JSON object.", field: "message")
        }
        // A map's values stay strings: only the message's and its objects' members may be null.
        let message = try fieldsBySnakeCaseName(object, allowed: messageFields, at: "message").setMembers
        let target = try target(of: message)
        if let data = message["data"] { try validateData(data) }
        if let notification = message["notification"] { try validateNotification(notification) }
        for (field, allowed) in objectFields {
            guard let value = message[field] else { continue }
            guard let object = value.members else {
                throw PayloadViolation("Invalid value at 'message.\(field)': expected a JSON object.", field: "message.\(field)")
            }
            let fields = try fieldsBySnakeCaseName(object, allowed: allowed, at: "message.\(field)").setMembers
            try validateTypedFields(fields, of: field)
        }
        // A body under the limit cannot hold a payload over it, so the common case skips measuring.
        if body.readableBytes > messageSizeLimit, payloadBytes(of: message) > messageSizeLimit {
            throw PayloadViolation(
                "Message is too big",
                field: "message",
                description: "Message is too big. Limit is \(messageSizeLimit) bytes."
            )
        }
        return SendRequest(target: target, validateOnly: validateOnly)
    }

    /// What the worker sets for an expiry, typed as FCM types it: `android.ttl` is a protobuf
    /// Duration (`"3600s"`, `"3.5s"`), the APNs and Web Push headers are maps of strings.
    private static func validateTypedFields(_ fields: [String: JSONValue], of object: String) throws(PayloadViolation) {
        if object == "android", let ttl = fields["ttl"] {
            guard let text = ttl.string, isDuration(text) else {
                throw PayloadViolation(
                    "Invalid value at 'message.android.ttl' (type.googleapis.com/google.protobuf.Duration), \(json(ttl))",
                    field: "message.android.ttl")
            }
        }
        if object == "apns" || object == "webpush", let headers = fields["headers"] {
            guard let map = headers.members else {
                throw PayloadViolation(
                    "Invalid value at 'message.\(object).headers': expected a JSON object.", field: "message.\(object).headers")
            }
            for (name, value) in map where value.string == nil {
                throw PayloadViolation(
                    "Invalid value at 'message.\(object).headers[\(name)].value' (TYPE_STRING), \(json(value))",
                    field: "message.\(object).headers")
            }
        }
    }

    /// `"<seconds>s"` or `"<seconds>.<up to 9 digits>s"`, as protobuf's JSON Duration.
    static func isDuration(_ text: String) -> Bool {
        guard text.hasSuffix("s") else { return false }
        let number = text.dropLast().split(separator: ".", omittingEmptySubsequences: false)
        guard (1...2).contains(number.count), !number[0].isEmpty, number[0].allSatisfy(\.isASCII), number[0].allSatisfy(\.isNumber) else {
            return false
        }
        if number.count == 2 {
            return (1...9).contains(number[1].count) && number[1].allSatisfy { $0.isASCII && $0.isNumber }
        }
        return true
    }

    /// `object`'s fields keyed by their snake_case names, or the front end's refusal of the first
    /// name that is not among `allowed` in either spelling.
    private static func fieldsBySnakeCaseName(_ object: [String: JSONValue], allowed: Set<String>, at path: String?)
        throws(PayloadViolation) -> [String: JSONValue]
    {
        // Every send passes here: names are checked in the dictionary's order, and sorted (so
        // that the refusal names the same field each time) only when one is refused.
        var renamed = false
        for name in object.keys {
            let snake = snakeCase(name)
            guard allowed.contains(snake) else {
                let first = object.keys.sorted().first { !allowed.contains(snakeCase($0)) } ?? name
                let location = path.map { " at '\($0)'" } ?? ""
                throw PayloadViolation(
                    "Invalid JSON payload received. Unknown name \"\(first)\"\(location): Cannot find field.", field: path ?? "")
            }
            renamed = renamed || snake != name
        }
        guard renamed else { return object }
        var fields: [String: JSONValue] = [:]
        for name in object.keys.sorted() { fields[snakeCase(name)] = object[name] }
        return fields
    }

    /// `fcmOptions` → `fcm_options`; a name without capitals stays as it is. FCM's field names
    /// are ASCII: capitals are looked for as bytes (a Character walk cost a tenth of the
    /// emulator's CPU per send).
    static func snakeCase(_ name: String) -> String {
        func isCapital(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") }
        guard name.utf8.contains(where: isCapital) else { return name }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(name.utf8.count + 4)
        for byte in name.utf8 {
            if isCapital(byte) {
                bytes.append(UInt8(ascii: "_"))
                bytes.append(byte + 32)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    private static func validateOnlyFlag(_ value: JSONValue?) throws(PayloadViolation) -> Bool {
        guard let value else { return false }
        guard let flag = value.bool else {
            throw PayloadViolation("Invalid value at 'validate_only' (TYPE_BOOL), \(json(value))", field: "validate_only")
        }
        return flag
    }

    private static func target(of message: [String: JSONValue]) throws(PayloadViolation) -> MessageTarget {
        let present = targetFields.filter { message[$0] != nil }
        guard let field = present.first else {
            throw PayloadViolation("Recipient of the message is not set.", field: "message", fromFCM: true)
        }
        guard present.count == 1 else {
            throw PayloadViolation(
                "Invalid value at 'message' (oneof), oneof field 'target' is already set. Cannot set '\(present[1])'",
                field: "message"
            )
        }
        guard let value = message[field]?.string else {
            throw PayloadViolation("Invalid value at 'message.\(field)' (TYPE_STRING)", field: "message.\(field)")
        }
        switch field {
        case "token", "fid":
            guard !value.isEmpty, !value.unicodeScalars.contains(where: Self.isWhitespace) else {
                throw .invalidRegistrationToken(field: "message.\(field)")
            }
            return field == "token" ? .token(value) : .fid(value)
        case "topic":
            guard !value.isEmpty else { throw PayloadViolation("Invalid value at 'message.topic'", field: "message.topic", fromFCM: true) }
            return .topic(value)
        default:
            guard !value.isEmpty else {
                throw PayloadViolation("Invalid value at 'message.condition'", field: "message.condition", fromFCM: true)
            }
            return .condition(value)
        }
    }

    /// Unicode White_Space, without Character's grapheme breaking: tokens are long and all ASCII.
    private static func isWhitespace(_ scalar: Unicode.Scalar) -> Bool {
        scalar.isASCII ? scalar == " " || (0x09...0x0D).contains(scalar.value) : scalar.properties.isWhitespace
    }

    private static func validateData(_ value: JSONValue) throws(PayloadViolation) {
        guard let data = value.members else {
            throw PayloadViolation("Invalid value at 'message.data': expected a map of strings.", field: "message.data")
        }
        // A parsed object does not keep member order; sorted keys make the reported index deterministic.
        for (index, key) in data.keys.sorted().enumerated() {
            let field = "message.data[\(index)].value"
            guard let entry = data[key], entry.string != nil else {
                throw PayloadViolation("Invalid value at '\(field)' (TYPE_STRING), \(data[key].map(json) ?? "null")", field: field)
            }
            if isReserved(dataKey: key) {
                throw PayloadViolation("Invalid data payload key: \(key)", field: "message.data[\(index)].key", fromFCM: true)
            }
        }
    }

    /// `from`, `message_type` and keys starting with `google` or `gcm` belong to FCM.
    static func isReserved(dataKey: String) -> Bool {
        let key = dataKey.lowercased()
        return key == "from" || key == "message_type" || key.hasPrefix("google") || key.hasPrefix("gcm")
    }

    private static func validateNotification(_ value: JSONValue) throws(PayloadViolation) {
        guard let notification = value.members else {
            throw PayloadViolation("Invalid value at 'message.notification': expected a JSON object.", field: "message.notification")
        }
        _ = try fieldsBySnakeCaseName(notification, allowed: notificationFields, at: "message.notification")
        for (key, field) in notification.setMembers where field.string == nil {
            throw PayloadViolation(
                "Invalid value at 'message.notification.\(key)' (TYPE_STRING), \(json(field))",
                field: "message.notification.\(key)"
            )
        }
    }

    /// What FCM's 4096 bytes bound: the keys and values one device is sent (the notification,
    /// the data and its platform's block), without the JSON around them.
    static func payloadBytes(of message: [String: JSONValue]) -> Int {
        func bytes(_ value: JSONValue?) -> Int {
            switch value {
            case nil, .null?: 0
            case .string(let text)?: text.utf8.count
            case .object(let members)?: members.setMembers.reduce(0) { $0 + $1.key.utf8.count + bytes($1.value) }
            case .array(let elements)?: elements.reduce(0) { $0 + bytes($1) }
            case let scalar?: WireJSON.encoded(scalar).count
            }
        }
        let android = message["android"]
        let webpush = message["webpush"]
        let platform = max(
            bytes(android?["notification"]) + bytes(android?["data"]), bytes(message["apns"]?["payload"]),
            bytes(webpush?["notification"]) + bytes(webpush?["data"]))
        return bytes(message["notification"]) + bytes(message["data"]) + platform
    }

    /// A value as a refusal quotes it: as JSON, as Google's messages do.
    private static func json(_ value: JSONValue) -> String {
        String(decoding: WireJSON.encoded(value), as: UTF8.self)
    }
}
