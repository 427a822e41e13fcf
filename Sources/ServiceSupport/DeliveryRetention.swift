/// How long the delivery log keeps a day (DELIVERY_RETENTION_DAYS): push-worker drops the days
/// older than this once a day, with their ended jobs, and `pushctl retention` does it on demand.
public enum DeliveryRetention: Sendable, Equatable, CustomStringConvertible {
    /// Days older than this many go.
    case days(Int)
    /// `off`: nothing is dropped.
    case keepEverything

    public static let standard = DeliveryRetention.days(30)
    /// A day at least (the SQL function refuses less), ten years at most.
    public static let allowedDays = 1...3650

    /// DELIVERY_RETENTION_DAYS's text: a whole number of days, or `off`.
    public init(setting text: String) throws(ConfigurationError) {
        if text == "off" {
            self = .keepEverything
            return
        }
        guard let days = Int(text), Self.allowedDays.contains(days) else {
            throw .invalid(
                "DELIVERY_RETENTION_DAYS",
                "'\(text)' is neither a whole number of days in \(Self.allowedDays.lowerBound)...\(Self.allowedDays.upperBound) nor off")
        }
        self = .days(days)
    }

    /// As the setting is written: `30 days`, `off`.
    public var description: String {
        switch self {
        case .days(let days): "\(days) days"
        case .keepEverything: "off"
        }
    }
}

extension EnvironmentSettings {
    /// DELIVERY_RETENTION_DAYS, or the standard 30 days when it is unset.
    public func deliveryRetention() throws(ConfigurationError) -> DeliveryRetention {
        guard let text = value("DELIVERY_RETENTION_DAYS") else { return .standard }
        return try DeliveryRetention(setting: text)
    }
}
