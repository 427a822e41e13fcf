import ArgumentParser
import DeviceRegistry
import Foundation
import WireFormats

/// The message and scheduling options `send` and `campaign` share.
struct MessageOptions: ParsableArguments {
    @Option(help: "App code, e.g. wowa.") var app: String
    @Option(help: "A whole FCM v1 Message without its target, as JSON (instead of --title/--body/--data).") var message: String?
    @Option(help: "Notification title.") var title: String?
    @Option(help: "Notification body.") var body: String?
    @Option(help: "A data entry KEY=VALUE (repeatable).") var data: [String] = []
    @Option(help: "Same key, same job: a retried run never sends twice (e.g. daily-digest-$(date +%F)).") var idempotencyKey: String?
    @Option(help: "Send at this time, ISO 8601 (e.g. 2026-12-01T09:00:00Z); default now.") var at: String?
    @Option(
        help: ArgumentHelp(
            "Our scheduling priority (default: high for send, bulk for campaign).",
            discussion: "Which jobs workers serve first; not FCM's android.priority or apns-priority (set those in --message)."))
    var priority: JobPriority?
    @Option(help: "Skip (EXPIRED) what is not sent by this ISO 8601 time.") var expiresAt: String?
    // Unconditional: `--ttl -5` is refused as a lifetime, not as an unknown option.
    @Option(
        parsing: .unconditional,
        help: ArgumentHelp(
            "Skip (EXPIRED) what is not sent this long after the send time: seconds, or 90s, 15m, 2h, 1d.",
            valueName: "duration"),
        transform: MessageOptions.ttl)
    var ttl: Duration?
    @Flag(help: "Let FCM validate every message without delivering (validate_only).") var dryRun = false

    func validate() throws {
        if expiresAt != nil, ttl != nil { throw ValidationError("give --expires-at or --ttl, not both") }
    }

    /// `90`, `90s`, `15m`, `2h`, `1d`: a positive whole number of seconds, minutes, hours or days.
    static func ttl(_ text: String) throws -> Duration {
        let units: [Character: Int64] = ["s": 1, "m": 60, "h": 3600, "d": 86_400]
        let unit = text.last.flatMap { units[$0] }
        let digits = unit == nil ? Substring(text) : text.dropLast()
        guard digits.allSatisfy(\.isASCII), let count = Int64(digits), count > 0, count <= Int64.max / (unit ?? 1) else {
            throw ValidationError("expected a positive whole number of seconds, or of s, m, h or d (90s, 15m, 2h, 1d)")
        }
        let ttl = Duration.seconds(count * (unit ?? 1))
        guard ttl <= JobDirectory.longestTTL else {
            throw ValidationError("at most \(JobDirectory.longestTTL.components.seconds / 86_400)d (ten years)")
        }
        return ttl
    }

    func messageJSON() throws -> String {
        if let message {
            // Either would be dropped without a word.
            guard title == nil, body == nil, data.isEmpty else { throw CLIError("give --message, or --title/--body/--data, not both") }
            // PostgreSQL would refuse it too, but in its own words and without naming the option.
            let parsed: JSONValue
            do {
                parsed = try JSONParser.parse(Data(message.utf8), refusingRepeatedMembers: true)
            } catch {
                throw InvalidJSONOption(option: "--message", syntax: error)
            }
            if let path = parsed.pathHoldingNUL(from: "message") {
                throw CLIError("--message: \(path) must not contain NUL characters (\\u0000)")
            }
            return message
        }
        var object: [String: JSONValue] = [:]
        var notification: [String: JSONValue] = [:]
        if let title { notification["title"] = .string(title) }
        if let body { notification["body"] = .string(body) }
        if !notification.isEmpty { object["notification"] = .object(notification) }
        var entries: [String: JSONValue] = [:]
        for entry in data {
            let parts = entry.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, !parts[0].isEmpty else { throw CLIError("--data must be KEY=VALUE, got '\(entry)'") }
            guard entries.updateValue(.string(String(parts[1])), forKey: String(parts[0])) == nil else {
                throw CLIError("--data \(parts[0]) is given twice")
            }
        }
        if !entries.isEmpty { object["data"] = .object(entries) }
        guard !object.isEmpty else { throw CLIError("say what to send: --message JSON, or --title/--body/--data") }
        return String(decoding: WireJSON.encoded(JSONValue.object(object)), as: UTF8.self)
    }

    func sendAt() throws -> Date? {
        guard let at else { return nil }
        do { return try ISO8601Time.parse(at, field: "--at") } catch { throw CLIError("\(error)") }
    }

    func expiry() throws -> Date? {
        guard let expiresAt else { return nil }
        do { return try ISO8601Time.parse(expiresAt, field: "--expires-at") } catch { throw CLIError("\(error)") }
    }

    /// Queues the job; the SQL functions' refusals name their parameters, so say which option that was.
    /// Prints the job id alone on standard output (what scripts read), and says on standard
    /// error when the idempotency key had queued it before.
    func enqueue(_ database: DatabaseOptions, userIDs: [Int64]?, platforms: [String]?) async throws {
        let (message, sendAt, expiresAt) = (try messageJSON(), try sendAt(), try expiry())
        let job = try await withDatabase(database) { client, logger in
            do {
                return try await JobDirectory(client: client, logger: logger).enqueue(
                    appCode: app, userIDs: userIDs, platforms: platforms, message: message, idempotencyKey: idempotencyKey,
                    sendAt: sendAt, dryRun: dryRun, priority: priority, expiresAt: expiresAt, ttl: ttl)
            } catch let rejected as EnqueueRejected where rejected.parameter == .expiry {
                throw CLIError("\(self.expiresAt != nil ? "--expires-at" : "--ttl"): \(rejected.description)")
            }
        }
        print(job.id)
        if job.queuedBefore {
            FileHandle.standardError.write(
                Data(
                    "pushctl: idempotency key \"\(TextTable.printable(idempotencyKey ?? ""))\" had queued job \(job.id) before; nothing new was queued\n"
                        .utf8))
        }
    }
}

/// `--priority`: the parser refuses anything else, listing the cases.
extension JobPriority: ExpressibleByArgument {}

struct Send: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Queue a notification to users; prints the job id.")

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var options: MessageOptions
    @Option(name: .customLong("user"), help: "A user id (repeatable).") var users: [Int64] = []

    func run() async throws {
        try await reportingErrors {
            guard !users.isEmpty else { throw CLIError("name at least one --user") }
            if let user = users.first(where: { $0 <= 0 }) { throw CLIError("--user must be a positive user id, not \(user)") }
            try await options.enqueue(database, userIDs: users, platforms: nil)
        }
    }
}

struct Campaign: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Queue a notification to every active device of an app (what cron runs); prints the job id.")

    @OptionGroup var database: DatabaseOptions
    @OptionGroup var options: MessageOptions
    @Option(name: .customLong("platform"), help: "Only ios, android or web devices (repeatable; default all).") var platforms: [String] = []

    func run() async throws {
        try await reportingErrors {
            try await options.enqueue(database, userIDs: nil, platforms: platforms.isEmpty ? nil : platforms)
        }
    }
}

struct Jobs: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List recent jobs with their delivery counts.")

    @OptionGroup var database: AuditDatabaseOptions
    @Option(help: "Only jobs in this status (queued, running, completed, failed, cancelled).") var status: String?
    @Option(help: "How many, newest first.") var limit = 50

    func run() async throws {
        try await reportingErrors {
            let status = try JobStatus.parse(status, option: "--status")
            guard JobDirectory.listLimits.contains(Int64(limit)) else {
                throw CLIError("--limit must be \(JobDirectory.listLimits.lowerBound) to \(JobDirectory.listLimits.upperBound)")
            }
            let jobs = try await withAuditDatabase(database) { source, logger in
                try await JobDirectory(client: source.client, logger: logger).list(status: status, limit: limit)
            }
            print(
                TextTable.render(
                    header: [
                        "ID", "APP", "KIND", "STATUS", "DRY RUN", "PRIORITY", "SEND AT", "EXPIRES AT", "AUDIENCE",
                        "SENT", "FAILED", "SKIPPED", "EXPIRED", "PENDING", "TITLE",
                    ],
                    rows: jobs.map(Self.row)))
        }
    }

    /// Enough of a title to tell jobs apart, without pushing the row off the screen.
    static let titleWidth = 30

    static func row(_ job: JobSummary) -> [String] {
        [
            String(job.id), job.appCode, job.kind.rawValue, job.status.rawValue, job.dryRun ? "yes" : "-", job.priority.rawValue,
            WireJSON.formatted(job.sendAt),
            job.expiresAt.map(WireJSON.formatted) ?? "-", job.audience.map(String.init) ?? "-", String(job.sent), String(job.failed),
            String(job.skipped), String(job.expired), String(job.pending), job.title.map { TextTable.clipped($0, to: titleWidth) } ?? "-",
        ]
    }
}

struct Job: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show one job: status, delivery counts, its first error.",
        discussion: """
            With --watch, follows the job with a progress bar until it finishes and the sends in flight \
            when it ended are recorded (at most 90 s more), and exits 0 when it completed, 1 when it \
            failed or was cancelled.
            """)
    /// How long the sends in flight when a job ended may take to be recorded: a worker's drain
    /// bound with FCM's default deadline.
    static let inFlightBound = Duration.seconds(90)

    @OptionGroup var database: AuditDatabaseOptions
    @Argument(help: "The job id.") var id: Int64
    @Flag(help: "Follow the job until it finishes.") var watch = false
    @Option(help: "Seconds between looks while watching.") var interval: Double = 1

    func run() async throws {
        try await reportingErrors {
            guard interval > 0 else { throw CLIError("--interval must be positive") }
            let finished = try await withAuditDatabase(database) { source, logger in
                let jobs = JobDirectory(client: source.client, logger: logger)
                guard var job = try await jobs.job(id) else {
                    guard case .replica = source else { throw CLIError("no job \(id)") }
                    throw CLIError("no job \(id) on the standby (DATABASE_READ_URL): one queued a moment ago may not have reached it yet")
                }
                guard watch else {
                    print(JobReport.text(job))
                    return job
                }
                var progress = ProgressLine()
                progress.show(job)
                // A job ends before the sends in flight at that moment are recorded: they count as
                // pending until their answers are written, within a worker's FCM deadline of its end
                // (a job that ended long ago and still has pending rows is not waited for).
                func settlingBound(_ job: JobSummary) -> ContinuousClock.Instant? {
                    guard job.status.isFinished else { return nil }
                    let left = (job.finishedAt ?? Date()).addingTimeInterval(Self.inFlightBound.inSeconds).timeIntervalSinceNow
                    return ContinuousClock.now + .milliseconds(Int64(max(0, left) * 1000))
                }
                var settleBy = settlingBound(job)
                while settleBy.map({ job.pending > 0 && ContinuousClock.now < $0 }) ?? true {
                    try await Task.sleep(for: .seconds(interval))
                    guard let next = try await jobs.job(id) else { throw CLIError("job \(id) disappeared") }
                    job = next
                    if settleBy == nil { settleBy = settlingBound(job) }
                    progress.show(job)
                }
                progress.end()
                print(JobReport.text(job))
                return job
            }
            if watch, finished.status != .completed { throw ExitCode.failure }
        }
    }
}

/// How a job reads in a terminal.
enum JobReport {
    static func text(_ job: JobSummary) -> String {
        // Only a job with an expiry can have expired deliveries.
        let expired = job.expiresAt == nil && job.expired == 0 ? "" : " (\(job.expired) expired)"
        var lines = [
            "job \(job.id) (app \(job.appCode)): \(job.status)\(job.dryRun ? " (dry run)" : ""), priority \(job.priority.rawValue)",
            "\(job.kind.rawValue), title: \(job.title.map(TextTable.printable) ?? "-")",
            "send at: \(WireJSON.formatted(job.sendAt))" + (job.expiresAt.map { ", expires at \(WireJSON.formatted($0))" } ?? "")
                + (job.finishedAt.map { ", finished \(WireJSON.formatted($0))" } ?? ""),
            "audience \(job.audience.map(String.init) ?? "not counted"): sent \(job.sent), failed \(job.failed), skipped \(job.skipped)\(expired), pending \(job.pending)",
        ]
        if let error = job.firstError { lines.append("first error: \(TextTable.printable(error))") }
        return lines.joined(separator: "\n")
    }

    /// `[##########··········]  52%  5200/10000  sent 5100  failed 50  skipped 50  running`
    static func bar(_ job: JobSummary, width: Int = 30) -> String {
        let done = job.sent + job.failed + job.skipped
        // No audience to measure against (counted empty, or never counted): all done once finished.
        let fraction =
            switch job.audience {
            case nil, 0: job.status.isFinished ? 1.0 : 0
            case let audience?: Double(done) / Double(audience)
            }
        let filled = Int((fraction * Double(width)).rounded(.down))
        let state = job.status == .queued && job.sendAt > Date() ? "queued until \(WireJSON.formatted(job.sendAt))" : job.status.rawValue
        return "[" + String(repeating: "#", count: filled) + String(repeating: "·", count: width - filled) + "] "
            + "\(Int((fraction * 100).rounded(.down)))%".leftPadded(4)
            + "  \(done)/\(job.audience.map(String.init) ?? "-")  sent \(job.sent)  failed \(job.failed)  skipped \(job.skipped)  \(state)"
    }
}

/// Redraws one line on a terminal; elsewhere (a log file, a pipe) prints a line per change.
struct ProgressLine {
    private let isTerminal = isatty(STDOUT_FILENO) == 1
    private var last: String?

    mutating func show(_ job: JobSummary) {
        let line = JobReport.bar(job)
        guard line != last else { return }
        last = line
        if isTerminal {
            print("\r\u{1B}[2K" + line, terminator: "")
        } else {
            print(line)
        }
        // Each change shows at once, on a terminal or in a log being tailed. All streams:
        // `stdout` itself is a C global Swift 6 refuses.
        fflush(nil)
    }

    func end() {
        if isTerminal { print() }
    }
}

extension String {
    func leftPadded(_ width: Int) -> String {
        count >= width ? self : String(repeating: " ", count: width - count) + self
    }
}

struct Cancel: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Cancel a queued or running job: nothing more is sent; what was sent stays logged.")

    @OptionGroup var database: DatabaseOptions
    @Argument(help: "The job id.") var id: Int64

    func run() async throws {
        try await reportingErrors {
            let result = try await withDatabase(database) { client, logger in
                try await JobDirectory(client: client, logger: logger).cancel(id)
            }
            switch result {
            case .cancelled: print("job \(id) cancelled")
            case .alreadyFinished(let status): throw CLIError("job \(id) is already \(status)")
            case .notFound: throw CLIError("no job \(id)")
            }
        }
    }
}

struct Prune: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Deactivate devices idle for N days (reason stale); FCM rejects tokens idle for 270 days.")

    @OptionGroup var database: DatabaseOptions
    @Option(help: "Idle days after which a device is deactivated.") var idleDays = 270
    @Flag(help: "Only count what would be deactivated.") var dryRun = false

    func run() async throws {
        try await reportingErrors {
            guard (1...36_500).contains(idleDays) else { throw CLIError("--idle-days must be 1 to 36500 (a hundred years)") }
            let counts = try await withDatabase(database) { client, logger in
                try await JobDirectory(client: client, logger: logger).prune(idleDays: idleDays, dryRun: dryRun)
            }
            let total = counts.reduce(0) { $0 + $1.devices }
            for (app, devices) in counts { print("\(app): \(devices)") }
            print(
                dryRun
                    ? "would deactivate \(total) devices idle for over \(idleDays) days"
                    : "deactivated \(total) devices idle for over \(idleDays) days")
        }
    }
}
