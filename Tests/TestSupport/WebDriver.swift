import AsyncHTTPClient
import Foundation
import NIOCore
import NIOFoundationCompat
import NIOHTTP1

#if canImport(Glibc)
    import Glibc
#endif

/// A W3C WebDriver client for chromedriver: JSON over HTTP on loopback, just the commands the
/// console's browser tests use. Failures carry WebDriver's error name and message.
public struct WebDriverSession: Sendable {
    public let driverURL: URL
    public let id: String

    /// An element reference, as WebDriver returns it.
    public struct Element: Sendable, Hashable {
        public let id: String
    }

    /// The key WebDriver names element references by (W3C WebDriver, "Elements").
    static let elementKey = "element-6066-11e4-a52e-4f735466cecf"

    /// A headless Chromium session of `width`×`height` (CSS pixels), no extensions, no sandbox
    /// (tests may run as root, where Chromium's sandbox refuses to start).
    public static func start(driver: ChromeDriver, width: Int = 1280, height: Int = 900) async throws -> WebDriverSession {
        let options: [String: Any] = [
            "binary": driver.chromiumPath,
            "args": [
                "--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=\(width),\(height)",
                "--disable-extensions", "--no-first-run", "--hide-scrollbars", "--force-device-scale-factor=1",
            ],
        ]
        let capabilities: [String: Any] = [
            "capabilities": [
                "alwaysMatch": [
                    "browserName": "chrome", "goog:chromeOptions": options, "unhandledPromptBehavior": "ignore",
                ]
            ]
        ]
        let value = try await WebDriverHTTP.call(driver.url.appendingPathComponent("session"), method: "POST", body: capabilities)
        guard let id = (value as? [String: Any])?["sessionId"] as? String else {
            throw WebDriverError(error: "session not created", message: "no sessionId in \(value)")
        }
        return WebDriverSession(driverURL: driver.url, id: id)
    }

    private var sessionURL: URL { driverURL.appendingPathComponent("session").appendingPathComponent(id) }

    @discardableResult
    func command(_ path: String, method: String = "POST", _ body: [String: Any]? = nil) async throws -> Any {
        let url = path.isEmpty ? sessionURL : sessionURL.appendingPathComponent(path)
        return try await WebDriverHTTP.call(url, method: method, body: method == "POST" ? (body ?? [:]) : nil)
    }

    public func end() async {
        _ = try? await WebDriverHTTP.call(sessionURL, method: "DELETE", body: nil)
    }

    // MARK: navigation

    public func open(_ url: String) async throws {
        try await command("url", ["url": url])
    }

    public func currentURL() async throws -> String {
        try await command("url", method: "GET") as? String ?? ""
    }

    public func title() async throws -> String {
        try await command("title", method: "GET") as? String ?? ""
    }

    public func pageSource() async throws -> String {
        try await command("source", method: "GET") as? String ?? ""
    }

    /// PNG bytes of the viewport.
    public func screenshot() async throws -> Data {
        guard let base64 = try await command("screenshot", method: "GET") as? String, let png = Data(base64Encoded: base64) else {
            throw WebDriverError(error: "screenshot", message: "not base64")
        }
        return png
    }

    /// PNG bytes of the whole page: the window is resized to the page's height first, then back.
    public func fullPageScreenshot(width: Int = 1280) async throws -> Data {
        // The window's height is the page's plus what the window itself takes (headless too has some).
        let height =
            try await execute("return Math.ceil(document.documentElement.scrollHeight) + window.outerHeight - window.innerHeight") as? Int
            ?? 900
        try await command("window/rect", ["width": width, "height": min(max(height, 600), 4000)])
        let png = try await screenshot()
        try await command("window/rect", ["width": width, "height": 900])
        return png
    }

    // MARK: elements

    public func find(_ css: String) async throws -> Element {
        try Self.element(try await command("element", ["using": "css selector", "value": css]))
    }

    public func findAll(_ css: String) async throws -> [Element] {
        (try await command("elements", ["using": "css selector", "value": css]) as? [Any] ?? []).compactMap { try? Self.element($0) }
    }

    static func element(_ value: Any) throws -> Element {
        guard let id = (value as? [String: Any])?[elementKey] as? String else {
            throw WebDriverError(error: "no such element", message: "\(value)")
        }
        return Element(id: id)
    }

    /// The element's rendered text, as a reader sees it.
    public func text(_ element: Element) async throws -> String {
        try await command("element/\(element.id)/text", method: "GET") as? String ?? ""
    }

    public func text(of css: String) async throws -> String {
        try await text(try await find(css))
    }

    public func click(_ element: Element) async throws {
        try await command("element/\(element.id)/click")
    }

    public func click(_ css: String) async throws {
        try await click(try await find(css))
    }

    /// Clicks what leads to another page (a link, a form's button) and waits until the browser
    /// shows that page: a click returns once dispatched, not once the next document has loaded.
    public func clickToNavigate(_ css: String, timeout: Duration = .seconds(10)) async throws {
        try await execute("document.documentElement.dataset.webdriverLeaving = 'yes'")
        try await click(css)
        let arrived = try await wait(for: timeout) {
            try await execute("return document.readyState === 'complete' && !document.documentElement.dataset.webdriverLeaving") as? Bool
                == true
        }
        guard arrived else { throw WebDriverError(error: "timeout", message: "no new page after clicking \(css)") }
    }

    public func clear(_ element: Element) async throws {
        try await command("element/\(element.id)/clear")
    }

    /// Types `text` into the element (after clearing it).
    public func type(_ text: String, into css: String) async throws {
        let element = try await find(css)
        try await clear(element)
        try await command("element/\(element.id)/value", ["text": text])
    }

    public func property(_ name: String, of element: Element) async throws -> Any? {
        let value = try await command("element/\(element.id)/property/\(name)", method: "GET")
        return value is NSNull ? nil : value
    }

    // MARK: keyboard and viewport

    /// WebDriver's codes for keys that are not characters (W3C WebDriver, "Keyboard actions").
    public enum Key: String, Sendable {
        case tab = "\u{E004}"
        case enter = "\u{E007}"
        case shift = "\u{E008}"
    }

    /// Presses `keys` one after the other on whatever has the focus, as a person at the
    /// keyboard does; `text` types its characters the same way.
    public func press(_ keys: Key..., holding modifier: Key? = nil) async throws {
        try await keyActions(keys.map(\.rawValue), holding: modifier)
    }

    public func typeOnKeyboard(_ text: String) async throws {
        try await keyActions(text.map { String($0) }, holding: nil)
    }

    private func keyActions(_ keys: [String], holding modifier: Key?) async throws {
        var actions: [[String: Any]] = []
        if let modifier { actions.append(["type": "keyDown", "value": modifier.rawValue]) }
        for key in keys { actions += [["type": "keyDown", "value": key], ["type": "keyUp", "value": key]] }
        if let modifier { actions.append(["type": "keyUp", "value": modifier.rawValue]) }
        try await command("actions", ["actions": [["type": "key", "id": "keyboard", "actions": actions]]])
    }

    /// Lays pages out as a phone of `width`×`height` CSS pixels would (Chrome's device
    /// emulation, which honours the pages' viewport meta tag); nil width: the window again.
    public func emulatePhone(width: Int?, height: Int = 812) async throws {
        if let width {
            try await command(
                "goog/cdp/execute",
                [
                    "cmd": "Emulation.setDeviceMetricsOverride",
                    "params": ["width": width, "height": height, "deviceScaleFactor": 1, "mobile": true],
                ])
        } else {
            try await command("goog/cdp/execute", ["cmd": "Emulation.clearDeviceMetricsOverride", "params": [String: Any]()])
        }
    }

    // MARK: scripts, cookies, dialogs

    /// Runs `script` as WebDriver does (outside the page's Content-Security-Policy) and returns its value.
    @discardableResult
    public func execute(_ script: String, _ arguments: [Any] = []) async throws -> Any? {
        let value = try await command("execute/sync", ["script": script, "args": arguments])
        return value is NSNull ? nil : value
    }

    /// Every cookie the browser holds for the current page, with the flags it stored
    /// (`httpOnly`, `secure`, `sameSite`, `path`), which the page's own script cannot read.
    public func cookies() async throws -> [[String: Any]] {
        try await command("cookie", method: "GET") as? [[String: Any]] ?? []
    }

    public func deleteAllCookies() async throws {
        try await command("cookie", method: "DELETE")
    }

    /// The text of the open alert, confirm or prompt; nil when there is none.
    public func openDialogText() async throws -> String? {
        do {
            return try await command("alert/text", method: "GET") as? String
        } catch let error as WebDriverError where error.error == "no such alert" {
            return nil
        }
    }

    /// Polls `condition` until it holds or `timeout` passes; the last value is returned either way.
    @discardableResult
    public func wait(
        for timeout: Duration = .seconds(10), every interval: Duration = .milliseconds(100),
        until condition: @Sendable () async throws -> Bool
    ) async throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if (try? await condition()) == true { return true }
            try await Task.sleep(for: interval)
        }
        return try await condition()
    }
}

public struct WebDriverError: Error, CustomStringConvertible {
    public let error: String
    public let message: String
    public var description: String { "WebDriver \(error): \(message)" }
}

enum WebDriverHTTP {
    /// One command: the reply's `value`, or its error as a `WebDriverError`. (Through
    /// AsyncHTTPClient: FoundationNetworking's URLSession fails on chromedriver's replies with
    /// "Failed writing header".)
    static func call(_ url: URL, method: String, body: [String: Any]?) async throws -> Any {
        var request = HTTPClientRequest(url: url.absoluteString)
        request.method = HTTPMethod(rawValue: method)
        if let body {
            request.body = .bytes(ByteBuffer(data: try JSONSerialization.data(withJSONObject: body)))
            request.headers.add(name: "Content-Type", value: "application/json; charset=utf-8")
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(60))
        let data = Data(buffer: try await response.body.collect(upTo: 64 << 20))
        let reply = try JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed]) as? [String: Any] ?? [:]
        let value = reply["value"] ?? NSNull()
        if let failure = value as? [String: Any], let error = failure["error"] as? String {
            throw WebDriverError(
                error: error, message: (failure["message"] as? String ?? "").split(separator: "\n").first.map(String.init) ?? "")
        }
        return value
    }
}

/// chromedriver as a subprocess on a free loopback port, driving Debian's `chromium`.
public final class ChromeDriver: Sendable {
    public let url: URL
    public let chromiumPath: String
    let process: RunningProduct

    /// Where Debian's `chromium` and `chromium-driver` packages put the browser and its driver.
    public static let chromiumCandidates = ["/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"]
    public static let driverCandidates = ["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"]

    public static func installed() -> (chromium: String, driver: String)? {
        let fileManager = FileManager.default
        guard let chromium = chromiumCandidates.first(where: fileManager.isExecutableFile(atPath:)),
            let driver = driverCandidates.first(where: fileManager.isExecutableFile(atPath:))
        else { return nil }
        return (chromium, driver)
    }

    /// Whether the browser tests can run: Chromium and its driver are installed, or apt-get can
    /// install them (as root). Installs them then, as scripts/test does. Nil when they can run;
    /// otherwise why not, for the skip's message.
    public static func availability() async -> String? {
        if installed() != nil { return nil }
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/apt-get") else {
            return "the console's browser tests need Debian's chromium and chromium-driver, which are not installed and cannot be "
                + "without apt-get as root: install them (apt-get install chromium chromium-driver) to run these tests"
        }
        // apt-get is there: an install that fails is the tests' failure, not a reason to skip.
        _ = try? await BuiltProduct(absolutePath: "/bin/sh").run(
            ["-c", "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null"])
        return nil
    }

    public init() async throws {
        guard let (chromium, driver) = Self.installed() else {
            throw WebDriverError(
                error: "not installed", message: "chromium or chromedriver is missing after apt-get install chromium chromium-driver")
        }
        let port = try LocalCluster.freePort()
        chromiumPath = chromium
        url = URL(string: "http://127.0.0.1:\(port)")!
        process = try BuiltProduct(absolutePath: driver).start(["--port=\(port)", "--allowed-ips=127.0.0.1"], environment: [:])
        var ready = false
        var problem = "not ready"
        for _ in 0..<100 where !ready {
            do {
                let status = try await WebDriverHTTP.call(url.appendingPathComponent("status"), method: "GET", body: nil)
                ready = ((status as? [String: Any])?["ready"] as? NSNumber)?.boolValue == true
                problem = "status: \(status)"
            } catch {
                problem = "\(error)"
            }
            if !ready { try await Task.sleep(for: .milliseconds(100)) }
        }
        guard ready else {
            process.signal(SIGKILL)
            throw WebDriverError(error: "chromedriver did not start", message: "\(problem); \(process.log)")
        }
    }

    public func stop() async {
        await process.terminate(within: .seconds(5))
    }
}

extension BuiltProduct {
    /// A program that is not one of the package's, such as chromedriver.
    public init(absolutePath: String) {
        path = absolutePath
    }
}
