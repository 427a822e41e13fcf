import DeviceRegistry
import FCMEmulator
import Foundation
import Logging
import PostgresNIO
import PushDispatch
import ServiceLifecycle
import TestSupport

/// Adds an app with these service-account credentials (or none) and returns its id.
func addApp(_ client: PostgresClient, code: String, projectID: String?, clientEmail: String?, privateKeyPEM: String?, privateKeyID: String?)
    async throws -> Int64
{
    let account = projectID.flatMap { project in
        clientEmail.flatMap { email in
            privateKeyPEM.map { ServiceAccount(projectID: project, clientEmail: email, privateKeyPEM: $0, privateKeyID: privateKeyID) }
        }
    }
    return try await AppDirectory(client: client, logger: workerLogger).add(code: code, name: code, serviceAccount: account).id
}

let workerLogger: Logger = {
    var logger = Logger(label: "worker-tests")
    logger.logLevel = .warning
    return logger
}()

/// A database with an app whose service account the emulator knows, and the worker's settings
/// pointing at that emulator over HTTP/2 + TLS.
struct WorkerFixture: Sendable {
    let database: TestDatabase
    let emulator: RunningEmulator
    let account: ServiceAccountFixture
    let appID: Int64

    static func with<T: Sendable>(appCode: String = "wowa", _ body: @Sendable (WorkerFixture) async throws -> T) async throws -> T {
        let database = try await TestPostgres.shared.makeDatabase()
        return try await FCMEmulator.withRunning(.init(retainedMessageLimit: 100), logger: workerLogger) { emulator in
            let account = try ServiceAccountFixture.generate(projectID: "\(appCode)-project")
            emulator.registerServiceAccount(account.serviceAccount)
            let appID = try await database.withClient { client in
                try await addApp(
                    client, code: appCode, projectID: account.projectID, clientEmail: account.clientEmail,
                    privateKeyPEM: account.privateKeyPEM, privateKeyID: account.privateKeyID)
            }
            return try await body(WorkerFixture(database: database, emulator: emulator, account: account, appID: appID))
        }
    }

    /// Another app, its project `CODE-project`, whose service account the emulator knows.
    func addOtherApp(code: String) async throws -> Int64 {
        let account = try ServiceAccountFixture.generate(projectID: "\(code)-project")
        emulator.registerServiceAccount(account.serviceAccount)
        return try await sql { client in
            try await addApp(
                client, code: code, projectID: account.projectID, clientEmail: account.clientEmail,
                privateKeyPEM: account.privateKeyPEM, privateKeyID: account.privateKeyID)
        }
    }

    var configuration: DispatchConfiguration {
        var configuration = DispatchConfiguration(databaseURL: database.url)
        configuration.fcmBaseURL = emulator.baseURL
        configuration.googleTokenURL = emulator.tokenURL
        configuration.caFile = emulator.caFilePath
        configuration.pollInterval = .milliseconds(200)
        configuration.concurrency = 64
        configuration.lease = .seconds(5)
        return configuration
    }

    /// Runs a worker (the same function push-worker runs) for the duration of `body`, then stops
    /// it the way SIGTERM does: a graceful shutdown, so it drains and records before its database
    /// client closes. (Cancelling it instead closed the client under the writer, and a worker
    /// now and then never finished stopping.)
    func withWorker<T: Sendable>(_ configuration: DispatchConfiguration? = nil, _ body: @Sendable () async throws -> T) async throws -> T {
        try await withWorkers([WorkerService(configuration: configuration ?? self.configuration)], body)
    }

    /// Several workers on the queue at once, as `withWorker` runs one.
    func withWorkers<T: Sendable>(_ workers: [WorkerService], _ body: @Sendable () async throws -> T) async throws -> T {
        let worker = ServiceGroup(configuration: .init(services: workers, logger: workerLogger))
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await worker.run() }
            let result: Result<T, any Error>
            do { result = .success(try await body()) } catch { result = .failure(error) }
            await worker.triggerGracefulShutdown()
            try await group.waitForAll()
            return try result.get()
        }
    }

    func sql<T: Sendable>(_ body: @Sendable (PostgresClient) async throws -> T) async throws -> T {
        try await database.withClient(body)
    }

    /// Registers `tokens` for user ids 1…n (one device each), returns device ids by token.
    @discardableResult
    func register(_ tokens: [String], users: [Int64]? = nil, platform: String = "android") async throws -> [String: Int64] {
        let appID = self.appID
        return try await sql { client in
            let registry = DeviceDirectory(client: client)
            var ids: [String: Int64] = [:]
            for (index, token) in tokens.enumerated() {
                let user = users?[index] ?? Int64(index + 1)
                let device = try await registry.register(
                    DeviceRegistration(token: token, platform: platform, deviceID: nil, tokenType: nil),
                    userID: user, appID: appID, logger: workerLogger
                ).device
                ids[token] = device.id
            }
            return ids
        }
    }

    func enqueue(
        users: [Int64], message: String = #"{"notification":{"title":"Hi","body":"there"},"data":{"k":"v"}}"#,
        key: String? = nil, sendAt: Date? = nil, dryRun: Bool = false
    ) async throws -> Int64 {
        try await sql { client in
            let rows = try await client.query(
                "SELECT push_enqueue(app_code => 'wowa', user_ids => \(users), message => \(message)::jsonb, idempotency_key => \(key), send_at => \(sendAt), dry_run => \(dryRun))"
            )
            for try await id in rows.decode(Int64.self) { return id }
            throw CancellationError()
        }
    }

    func campaign(message: String = #"{"notification":{"title":"All"}}"#) async throws -> Int64 {
        try await sql { client in
            let rows = try await client.query("SELECT push_enqueue_campaign(app_code => 'wowa', message => \(message)::jsonb)")
            for try await id in rows.decode(Int64.self) { return id }
            throw CancellationError()
        }
    }

    /// Waits for the job to finish (completed, failed or cancelled); returns status and last_error.
    func finished(_ job: Int64, within limit: Duration = .seconds(30)) async throws -> (status: String, error: String?) {
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            let state = try await sql { client in
                var result: (String, String?) = ("", nil)
                for try await row in try await client.query("SELECT status, last_error FROM push_jobs WHERE id = \(job)").decode(
                    (String, String?).self)
                {
                    result = row
                }
                return result
            }
            if ["completed", "failed", "cancelled"].contains(state.0) { return state }
            try await Task.sleep(for: .milliseconds(100))
        }
        return ("timeout", nil)
    }

    struct Delivery: Sendable {
        let token: String
        let status: String
        let errorCode: String?
        let errorMessage: String?
        let messageID: String?
        let attempts: Int
    }

    func deliveries(_ job: Int64) async throws -> [String: Delivery] {
        try await sql { client in
            var result: [String: Delivery] = [:]
            for try await (token, status, code, message, messageID, attempts) in try await client.query(
                """
                SELECT v.token, d.status, d.error_code, d.error_message, d.fcm_message_id, d.attempts
                  FROM push_deliveries d JOIN push_devices v ON v.id = d.device_id WHERE d.job_id = \(job)
                """
            ).decode((String, String, String?, String?, String?, Int).self) {
                result[token] = Delivery(
                    token: token, status: status, errorCode: code, errorMessage: message, messageID: messageID,
                    attempts: attempts)
            }
            return result
        }
    }

    func deviceState(_ token: String) async throws -> (active: Bool, reason: String?) {
        try await sql { client in
            for try await row in try await client.query(
                "SELECT is_active, deactivation_reason FROM push_devices WHERE token = \(token)"
            ).decode((Bool, String?).self) { return row }
            return (false, "missing")
        }
    }
}

/// push-worker's `runWorker` as a service of a test's own group, which stops it gracefully.
struct WorkerService: Service {
    let configuration: DispatchConfiguration
    var logger = workerLogger

    func run() async throws {
        try await runWorker(configuration, logger: logger, signals: [])
    }
}
