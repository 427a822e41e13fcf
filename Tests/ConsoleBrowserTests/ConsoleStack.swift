import AsyncHTTPClient
import DeviceRegistry
import Foundation
import Logging
import NIOCore
import NIOFoundationCompat
import NIOSSL
import PostgresNIO
import TestSupport
import Testing

/// The programs as deployed, each built by the suite and run as a subprocess on a throwaway
/// database: fcm-emulator (with its demo service account), push-worker sending to it, push-api
/// serving the console, and a headless Chromium driven through chromedriver. Started once for
/// the suite and shared by its tests (see `ConsoleStack.Scope`), which keeps the suite to seconds.
final class ConsoleStack: Sendable {
    static let adminToken = "browser-admin-token-0123456789abcdef"
    static let appCode = "demo"

    let folder: URL
    let database: TestDatabase
    let emulator: RunningProduct
    let emulatorBaseURL: String
    let emulatorCAFile: String
    let worker: RunningProduct
    let api: RunningProduct
    let consoleURL: String
    let appID: Int64
    let driver: ChromeDriver
    let browser: WebDriverSession
    let https: HTTPClient

    @TaskLocal static var current: ConsoleStack?

    /// The stack of the running suite.
    static func shared() throws -> ConsoleStack {
        try #require(current, "the test runs outside ConsoleStack.Scope (add the .consoleStack trait to its suite)")
    }

    private init(
        folder: URL, database: TestDatabase, emulator: RunningProduct, emulatorBaseURL: String, emulatorCAFile: String,
        worker: RunningProduct, api: RunningProduct, consoleURL: String, appID: Int64, driver: ChromeDriver,
        browser: WebDriverSession, https: HTTPClient
    ) {
        self.folder = folder
        self.database = database
        self.emulator = emulator
        self.emulatorBaseURL = emulatorBaseURL
        self.emulatorCAFile = emulatorCAFile
        self.worker = worker
        self.api = api
        self.consoleURL = consoleURL
        self.appID = appID
        self.driver = driver
        self.browser = browser
        self.https = https
    }

    static func start() async throws -> ConsoleStack {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("console-browser-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let database = try await TestPostgres.shared.makeDatabase()
        var started: [RunningProduct] = []
        do {
            let account = folder.appendingPathComponent("demo-service-account.json").path
            let emulator = try BuiltProduct("fcm-emulator").start(
                ["--port", "0", "--ca-out", folder.appendingPathComponent("ca.pem").path, "--demo-service-account", account],
                environment: [:])
            started.append(emulator)
            let settings = try await Self.waitForLine(in: emulator, containing: "FCM_BASE_URL=", what: "fcm-emulator")
            func setting(_ name: String) -> String {
                settings.split(separator: " ").first { $0.hasPrefix(name + "=") }.map { String($0.dropFirst(name.count + 1)) } ?? ""
            }
            let (baseURL, tokenURL, caFile) = (setting("FCM_BASE_URL"), setting("GOOGLE_TOKEN_URL"), setting("PUSH_CA_FILE"))

            let added = try await BuiltProduct("pushctl").run(
                ["app", "add", "--code", appCode, "--name", "Demo", "--service-account", account],
                environment: ["DATABASE_URL": database.url])
            guard added.status == 0, let appID = added.stdout.firstMatch(of: /\(id (\d+)\)/).flatMap({ Int64($0.1) }) else {
                throw StackError("pushctl app add failed: \(added.stdout) \(added.stderr)")
            }

            let worker = try BuiltProduct("push-worker").start(
                [],
                environment: [
                    "DATABASE_URL": database.url, "FCM_BASE_URL": baseURL, "GOOGLE_TOKEN_URL": tokenURL, "PUSH_CA_FILE": caFile,
                    "WORKER_CONCURRENCY": "16", "LOG_LEVEL": "info",
                ])
            started.append(worker)

            let port = try LocalCluster.freePort()
            let api = try BuiltProduct("push-api").start(
                [],
                environment: [
                    "DATABASE_URL": database.url, "API_PORT": "\(port)", "PUSH_ADMIN_TOKEN": adminToken,
                    "JWT_SECRET": "browser-tests-jwt-secret-0123456789abcdef", "LOG_LEVEL": "info",
                ])
            started.append(api)
            try await api.waitUntilHealthy(port: port)
            let consoleURL = "http://127.0.0.1:\(port)/console"
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.trustRoots = .file(caFile)
            let https = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(tlsConfiguration: tls))
            do {
                let driver = try await ChromeDriver()
                let browser: WebDriverSession
                do {
                    browser = try await WebDriverSession.start(driver: driver)
                } catch {
                    await driver.stop()
                    throw error
                }
                return ConsoleStack(
                    folder: folder, database: database, emulator: emulator, emulatorBaseURL: baseURL,
                    emulatorCAFile: caFile, worker: worker, api: api, consoleURL: consoleURL, appID: appID,
                    driver: driver, browser: browser, https: https)
            } catch {
                try? await https.shutdown()
                throw error
            }
        } catch {
            for product in started { product.signal(SIGKILL) }
            throw error
        }
    }

    func stop() async {
        await browser.end()
        await driver.stop()
        try? await https.shutdown()
        for product in [api, worker, emulator] { await product.terminate() }
        try? FileManager.default.removeItem(at: folder)
    }

    static func waitForLine(in product: RunningProduct, containing text: String, what: String) async throws -> String {
        for _ in 0..<200 {
            if let line = product.log.split(separator: "\n").first(where: { $0.contains(text) }) { return String(line) }
            if await product.exitStatus(within: .milliseconds(50)) != nil { break }
        }
        throw StackError("\(what) did not start: \(product.log)")
    }

    // MARK: what the tests use

    /// The console page at `path` (`/jobs`, or empty for the overview).
    func open(_ path: String) async throws {
        try await browser.open(consoleURL + path)
    }

    /// Signs in through the form unless the browser already has a session.
    func signIn() async throws {
        try await open("")
        if try await browser.currentURL().hasSuffix("/console/sign-in") {
            try await browser.type(Self.adminToken, into: "#token")
            try await browser.clickToNavigate("form button[type=submit]")
        }
        #expect(try await browser.text(of: "h1") == "Overview", "signed in")
    }

    /// Registers a device as push-api's registration does (the same SQL).
    @discardableResult
    func register(token: String, user: Int64, platform: String = "android", deviceID: String? = nil) async throws -> Int64 {
        let appID = self.appID
        return try await database.withClient { client in
            try await DeviceDirectory(client: client).register(
                DeviceRegistration(token: token, platform: platform, deviceID: deviceID, tokenType: nil),
                userID: user, appID: appID, logger: Logger(label: "console-browser-tests")
            ).device.id
        }
    }

    func text(_ query: String) async throws -> String {
        try await database.withClient { client in
            for try await value in try await client.query(PostgresQuery(unsafeSQL: query)).decode(String?.self) { return value ?? "" }
            return ""
        }
    }

    /// The emulator's ledger (`GET /emulator/stats`): what FCM accepted, per device token.
    func emulatorStats() async throws -> [String: Any] {
        try await emulatorJSON("/emulator/stats") as? [String: Any] ?? [:]
    }

    /// Whether the emulator accepted a message for `token`.
    func emulatorAccepted(token: String) async throws -> Int {
        let devices = try await emulatorStats()["devices"] as? [String: Any] ?? [:]
        return (devices[token] as? [String: Any])?["accepted"] as? Int ?? 0
    }

    func emulatorJSON(_ path: String) async throws -> Any {
        let response = try await https.execute(HTTPClientRequest(url: emulatorBaseURL + path), timeout: .seconds(5))
        let body = try await response.body.collect(upTo: 4 << 20)
        return try JSONSerialization.jsonObject(with: Data(buffer: body))
    }

    /// ISO 8601 in UTC, as the compose form takes times.
    static func iso(_ date: Date) -> String {
        date.formatted(.iso8601)
    }
}

struct StackError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

extension ConsoleStack {
    /// Starts the stack before the suite's first test and stops it after its last; skips the
    /// suite, saying why, only when Chromium is neither installed nor installable.
    struct Scope: SuiteTrait, TestScoping {
        var isRecursive: Bool { false }

        func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
            let stack = try await ConsoleStack.start()
            do {
                try await ConsoleStack.$current.withValue(stack, operation: function)
            } catch {
                await stack.stop()
                throw error
            }
            await stack.stop()
        }
    }
}

extension Trait where Self == ConsoleStack.Scope {
    static var consoleStack: ConsoleStack.Scope { ConsoleStack.Scope() }
}
