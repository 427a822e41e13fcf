import Foundation
import Logging

/// push-worker's settings (see the README's configuration table).
public struct DispatchConfiguration: Sendable {
    public var databaseURL: String
    public var fcmBaseURL: String = "https://fcm.googleapis.com"
    public var googleTokenURL: String = "https://oauth2.googleapis.com/token"
    public var caFile: String?
    /// Most FCM requests in flight in this process.
    public var concurrency: Int = 256
    public var metricsPort: Int?
    public var logLevel: Logger.Level = .info
    /// How long a claimed delivery stays ours without a heartbeat: a crashed worker's work is
    /// taken over after at most this long.
    public var lease: Duration = .seconds(30)
    public var requestTimeout: Duration = .seconds(10)
    public var maxAttempts: Int = 5
    public var pollInterval: Duration = .seconds(1)
    /// Devices expanded into deliveries per statement.
    public var audienceChunk: Int = 5000
    /// How long a graceful shutdown waits for in-flight sends.
    public var drainTimeout: Duration = .seconds(20)
    public var workerName: String = "\(ProcessInfo.processInfo.hostName):\(ProcessInfo.processInfo.processIdentifier)"

    public init(databaseURL: String) {
        self.databaseURL = databaseURL
    }

    public enum Error: Swift.Error, CustomStringConvertible, Equatable {
        case missing(String)
        case invalid(String, String)

        public var description: String {
            switch self {
            case .missing(let name): "\(name) is required"
            case .invalid(let name, let reason): "\(name): \(reason)"
            }
        }
    }

    /// Reads DATABASE_URL, FCM_BASE_URL, GOOGLE_TOKEN_URL, PUSH_CA_FILE, WORKER_CONCURRENCY,
    /// METRICS_PORT, LOG_LEVEL and WORKER_LEASE_SECONDS.
    public static func fromEnvironment(_ environment: [String: String]) throws(Error) -> DispatchConfiguration {
        func value(_ name: String) -> String? {
            guard let value = environment[name], !value.isEmpty else { return nil }
            return value
        }
        func integer(_ name: String, _ range: ClosedRange<Int>) throws(Error) -> Int? {
            guard let text = value(name) else { return nil }
            guard let number = Int(text), range.contains(number) else {
                throw .invalid(name, "'\(text)' is not an integer in \(range.lowerBound)...\(range.upperBound)")
            }
            return number
        }
        guard let databaseURL = value("DATABASE_URL") else { throw .missing("DATABASE_URL") }
        var configuration = DispatchConfiguration(databaseURL: databaseURL)
        if let url = value("FCM_BASE_URL") { configuration.fcmBaseURL = url }
        if let url = value("GOOGLE_TOKEN_URL") { configuration.googleTokenURL = url }
        for (name, url) in [("FCM_BASE_URL", configuration.fcmBaseURL), ("GOOGLE_TOKEN_URL", configuration.googleTokenURL)] {
            guard let parsed = URL(string: url), ["http", "https"].contains(parsed.scheme ?? ""), parsed.host != nil else {
                throw .invalid(name, "'\(url)' is not an http(s) URL")
            }
        }
        if let path = value("PUSH_CA_FILE") {
            guard FileManager.default.isReadableFile(atPath: path) else { throw .invalid("PUSH_CA_FILE", "\(path) cannot be read") }
            configuration.caFile = path
        }
        if let concurrency = try integer("WORKER_CONCURRENCY", 1...10_000) { configuration.concurrency = concurrency }
        configuration.metricsPort = try integer("METRICS_PORT", 0...65535)
        if let lease = try integer("WORKER_LEASE_SECONDS", 5...3600) { configuration.lease = .seconds(lease) }
        if let text = value("LOG_LEVEL") {
            guard let level = Logger.Level(rawValue: text.lowercased()) else {
                throw .invalid("LOG_LEVEL", "'\(text)' is not one of trace, debug, info, notice, warning, error, critical")
            }
            configuration.logLevel = level
        }
        return configuration
    }
}
