import ArgumentParser
import DeviceRegistry
import Foundation
import WireFormats

enum OutputFormat: String, ExpressibleByArgument, CaseIterable {
    case table, json, csv
}

struct Deliveries: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "The delivery audit log, newest first, tokens masked.",
        discussion: "Rows stream as they are read: a whole campaign's log can be exported without holding it in memory.")

    @OptionGroup var database: AuditDatabaseOptions
    @Option(help: "Only this job's deliveries.") var job: Int64?
    @Option(help: "Only this user's deliveries.") var user: Int64?
    @Option(help: "Only this app's deliveries (app code).") var app: String?
    @Option(help: "Only deliveries in this status: pending, sent, failed or skipped.") var status: String?
    @Option(help: "Only deliveries changed at or after this ISO 8601 time.") var since: String?
    @Option(help: "At most this many rows (default: all).") var limit: Int?
    @Option(help: "table, json (one array) or csv.") var format: OutputFormat = .table

    func run() async throws {
        try await reportingErrors {
            let status = try DeliveryStatus.parse(status, option: "--status")
            if let limit, limit < 1 { throw CLIError("--limit must be at least 1") }
            let since = try self.since.map { text in
                do { return try ISO8601Time.parse(text, field: "--since") } catch { throw CLIError("\(error)") }
            }
            let filter = DeliveryFilter(jobID: job, userID: user, appCode: app, status: status, since: since)
            var output = DeliveryWriter(format: format)
            try await withAuditDatabase(database) { source, logger in
                try await DeliveryLog(client: source.client, logger: logger).each(filter, limit: limit) { try output.write($0) }
            }
            output.finish()
        }
    }
}

/// Writes delivery rows one at a time in the chosen format, so nothing accumulates.
struct DeliveryWriter {
    let format: OutputFormat
    private var count = 0

    static let columns = ["ID", "JOB", "USER", "APP", "PLATFORM", "TOKEN", "STATUS", "ATTEMPTS", "UPDATED", "ERROR"]
    /// Fixed widths: a streamed table cannot measure rows it has not read yet.
    static let widths = [10, 8, 10, 12, 8, 22, 17, 8, 24]

    init(format: OutputFormat) {
        self.format = format
    }

    mutating func write(_ record: DeliveryRecord) throws {
        defer { count += 1 }
        switch format {
        case .table:
            if count == 0 { print(TextTable.line(Self.columns, widths: Self.widths)) }
            print(TextTable.line(Self.cells(record), widths: Self.widths))
        case .csv:
            if count == 0 { print(DeliveryCSV.header) }
            print(DeliveryCSV.line(record))
        case .json:
            print(count == 0 ? "[" : ",", String(decoding: WireJSON.encoded(record), as: UTF8.self), separator: "")
        }
    }

    func finish() {
        switch format {
        case .json: print(count == 0 ? "[]" : "]")
        case .table where count == 0: print("no deliveries match")
        case .table, .csv: break
        }
    }

    static func cells(_ record: DeliveryRecord) -> [String] {
        let error = [record.errorCode, record.errorMessage].compactMap { $0 }.joined(separator: ": ")
        return [
            String(record.id), String(record.jobID), String(record.userID), record.appCode, record.platform.rawValue,
            record.maskedToken, record.dryRun ? "\(record.status.rawValue) (dry run)" : record.status.rawValue, String(record.attempts),
            WireJSON.formatted(record.updatedAt), error,
        ]
    }
}

struct Devices: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "An app's devices (one user's with --user), tokens masked.")

    @OptionGroup var database: AuditDatabaseOptions
    @Option(help: "App code.") var app: String
    @Option(help: "Only this user's devices.") var user: Int64?
    @Option(help: "At most this many, active and most recently used first.") var limit = 1000

    func run() async throws {
        try await reportingErrors {
            guard limit >= 1 else { throw CLIError("--limit must be at least 1") }
            let devices = try await withAuditDatabase(database) { source, logger in
                guard let found = try await AppDirectory(client: source.client, logger: logger).app(code: app) else {
                    throw CLIError("no app with code '\(app)' (see pushctl app list)")
                }
                return try await DeviceDirectory(client: source.client).devices(
                    appID: found.id, userID: user, limit: limit, logger: logger)
            }
            guard !devices.isEmpty else {
                print(user.map { "user \($0) has no devices in \(app)" } ?? "\(app) has no devices")
                return
            }
            print(
                TextTable.render(
                    header: ["ID", "USER", "PLATFORM", "TOKEN", "TYPE", "DEVICE", "ACTIVE", "LAST USED", "DEACTIVATED"],
                    rows: devices.map { device in
                        [
                            String(device.id), String(device.userID), device.platform.rawValue, maskedToken(device.token),
                            device.tokenType.rawValue, device.deviceID ?? "-", device.isActive ? "yes" : "no",
                            WireJSON.formatted(device.lastUsedAt),
                            device.deactivatedAt.map { "\(WireJSON.formatted($0)) (\(device.deactivationReason?.rawValue ?? "?"))" } ?? "-",
                        ]
                    }))
        }
    }
}
