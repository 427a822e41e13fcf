import Foundation

public enum Platform: String, TextColumnEnum, Encodable {
    case ios, android, web
}

/// What the token addresses: an FCM registration token, or a Firebase Installation ID
/// (FCM's newer `fid` target).
public enum TokenType: String, TextColumnEnum, Encodable {
    case fcm, fid
}

/// A row of `push_devices`.
public struct Device: Sendable, Equatable {
    public let id: Int64
    public let userID: Int64
    public let appID: Int64
    public let token: String
    public let tokenType: TokenType
    public let platform: Platform
    public let deviceID: String?
    public let isActive: Bool
    public let lastUsedAt: Date
    public let createdAt: Date
    public let deactivatedAt: Date?
    public let deactivationReason: DeactivationReason?
}

/// A validated registration request: the only way to build one checks every field, so the
/// registry never sees a token the database would refuse.
public struct DeviceRegistration: Sendable, Equatable {
    public let token: String
    public let platform: Platform
    public let deviceID: String?
    public let tokenType: TokenType

    public init(token: String?, platform: String?, deviceID: String?, tokenType: String?) throws(DeviceValidationError) {
        guard let token else { throw .missing("token") }
        let length = token.unicodeScalars.count
        guard (1...500).contains(length) else { throw .invalid("token must be 1 to 500 characters") }
        guard !token.unicodeScalars.contains(where: Self.isSpaceOrControl) else {
            throw .invalid("token must not contain whitespace or control characters")
        }
        guard let platform else { throw .missing("platform") }
        guard let parsedPlatform = Platform(rawValue: platform) else {
            throw .invalid("platform must be one of \(Platform.choiceList)")
        }
        if let deviceID {
            guard (1...200).contains(deviceID.unicodeScalars.count) else {
                throw .invalid("deviceId must be 1 to 200 characters")
            }
            // Line and paragraph separators too: in a UTF-8 database, [[:cntrl:]] matches them.
            guard
                !deviceID.unicodeScalars.contains(where: {
                    [.control, .format, .lineSeparator, .paragraphSeparator].contains($0.properties.generalCategory)
                })
            else {
                throw .invalid("deviceId must not contain control, format or line separator characters")
            }
        }
        let parsedType: TokenType
        if let tokenType {
            guard let type = TokenType(rawValue: tokenType) else { throw .invalid("tokenType must be one of \(TokenType.choiceList)") }
            parsedType = type
        } else {
            parsedType = .fcm
        }
        self.token = token
        self.platform = parsedPlatform
        self.deviceID = deviceID
        self.tokenType = parsedType
    }

    private static func isSpaceOrControl(_ scalar: Unicode.Scalar) -> Bool {
        // FCM tokens are ASCII: decide those without the Unicode property tables (a hot path).
        if scalar.isASCII { return scalar.value <= 0x20 || scalar.value == 0x7F }
        return scalar.properties.isWhitespace || scalar.properties.generalCategory == .control
            || scalar.properties.generalCategory == .format
    }
}

public enum DeviceValidationError: Error, CustomStringConvertible, Equatable {
    case missing(String)
    case invalid(String)

    public var description: String {
        switch self {
        case .missing(let field): "\(field) is required"
        case .invalid(let message): message
        }
    }
}
