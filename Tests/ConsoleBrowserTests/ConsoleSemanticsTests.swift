import DeviceRegistry
import Foundation
import Logging
import TestSupport
import Testing

/// Semantic HTML as the browser sees it: every field has a label, the console works from the
/// keyboard alone, and no page scrolls sideways on a phone. In the suite of ConsoleBrowserTests
/// (it shares its stack and browser).
extension ConsoleBrowserTests {
    /// A page of the console in a state worth checking: its path, or what to do to reach it.
    struct PageState: Sendable {
        let name: String
        let reach: @Sendable (ConsoleStack) async throws -> Void
    }

    /// Every page, signed in, with its forms in their refused states too: a scheduled job (so
    /// that its cancel page exists), a user with a device, a compose and an add-app refusal.
    static func everyPage(_ stack: ConsoleStack) async throws -> [PageState] {
        try await stack.register(token: "semantics-\(UUID().uuidString.prefix(8))", user: 400, deviceID: "pixel-9")
        let job = try await stack.database.withClient { client in
            try await JobDirectory(client: client, logger: Logger(label: "console-browser-tests")).enqueue(
                appCode: ConsoleStack.appCode, userIDs: [400], platforms: nil, message: #"{"notification":{"title":"Later"}}"#,
                idempotencyKey: nil, sendAt: Date().addingTimeInterval(3600), dryRun: false
            ).id
        }
        func path(_ path: String) -> PageState { PageState(name: path.isEmpty ? "/" : path) { try await $0.open(path) } }
        return [
            path(""), path("/jobs"), path("/jobs?status=queued"), path("/jobs/\(job)"), path("/jobs/\(job)/cancel"), path("/compose"),
            path("/compose?app=demo"), path("/deliveries"), path("/deliveries?user=400&app=demo"), path("/devices"),
            path("/devices?app=demo&user=400"), path("/apps"), path("/jobs/999999999"),
            PageState(name: "/compose refused") { stack in
                try await stack.open("/compose?app=demo")
                try await stack.browser.type("not a user", into: "#userIds")
                try await stack.browser.clickToNavigate("button[value=preview]")
                #expect(try await stack.browser.findAll("[aria-invalid=true]").count > 0, "the compose page shows its refusal")
            },
            PageState(name: "/apps refused") { stack in
                try await stack.open("/apps")
                try await stack.browser.type("Not A Code!", into: "#code")
                try await stack.browser.type("Refused", into: "#name")
                try await stack.browser.clickToNavigate("form[action='/console/apps'] button[type=submit]")
                #expect(try await stack.browser.findAll("#code-error").count == 1, "the apps page shows its refusal")
            },
        ]
    }

    /// A label is a `<label>` tied to the field (by `for` or by wrapping it), or `aria-label`,
    /// or `aria-labelledby` naming elements that exist; each with some text.
    static let unlabelledFields = """
        const named = (text) => (text || '').trim() !== '';
        const fields = [...document.querySelectorAll('input, select, textarea')].filter((field) => field.type !== 'hidden');
        const unlabelled = fields.filter((field) =>
            !([...(field.labels || [])].some((label) => named(label.textContent))
              || named(field.getAttribute('aria-label'))
              || (field.getAttribute('aria-labelledby') || '').split(/\\s+/).filter(Boolean)
                   .some((id) => named(document.getElementById(id)?.textContent))));
        return { fields: fields.length, unlabelled: unlabelled.map((field) => field.outerHTML.slice(0, 160)) };
        """

    @Test func everyFieldOnEveryPageHasALabel() async throws {
        let stack = try ConsoleStack.shared()
        let browser = stack.browser
        try await stack.signIn()
        var fields = 0
        func check(_ name: String) async throws {
            let found = try #require(try await browser.execute(Self.unlabelledFields) as? [String: Any], "\(name)")
            fields += found["fields"] as? Int ?? 0
            #expect((found["unlabelled"] as? [String] ?? ["?"]).isEmpty, "\(name): \(found["unlabelled"] ?? "")")
        }
        for page in try await Self.everyPage(stack) {
            try await page.reach(stack)
            try await check(page.name)
        }
        try await browser.deleteAllCookies()
        try await stack.open("/sign-in")
        try await check("/sign-in")
        try await browser.type("wrong", into: "#token")
        try await browser.clickToNavigate("form button[type=submit]")
        try await check("/sign-in refused")
        #expect(fields > 40, "the fields of the jobs, compose, deliveries, devices, apps and sign-in forms were checked")
    }

    /// What has the focus: its id, or its text.
    func focused(_ browser: WebDriverSession) async throws -> String {
        try await browser.execute("const e = document.activeElement; return e.id || e.textContent.trim()") as? String ?? ""
    }

    /// What has the focus once the page has had its first rendering: the browser applies
    /// `autofocus` then, which may come after WebDriver's navigation returned.
    func focusedOnArrival(_ browser: WebDriverSession, awaiting id: String) async throws -> String {
        let deadline = ContinuousClock.now + .seconds(3)
        var focus = try await focused(browser)
        while focus != id && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(50))
            focus = try await focused(browser)
        }
        return focus
    }

    @Test func signingInAndReachingEveryPageTakesOnlyTheKeyboard() async throws {
        let stack = try ConsoleStack.shared()
        let browser = stack.browser
        try await browser.deleteAllCookies()
        try await stack.open("/sign-in")
        #expect(try await focusedOnArrival(browser, awaiting: "token") == "token", "the field has the focus on arrival")
        try await browser.press(.tab, holding: .shift)
        #expect(try await focused(browser) == "push-service", "Shift+Tab goes back to the header")
        try await browser.press(.tab)
        #expect(try await focused(browser) == "token", "Tab comes to the field")
        try await browser.typeOnKeyboard(ConsoleStack.adminToken)
        try await browser.execute("document.documentElement.dataset.webdriverLeaving = 'yes'")
        try await browser.press(.enter)
        let arrived = try await browser.wait {
            try await browser.execute("return document.readyState === 'complete' && !document.documentElement.dataset.webdriverLeaving")
                as? Bool == true
        }
        #expect(arrived, "Enter signs in")
        #expect(try await browser.text(of: "h1") == "Overview")

        // From the top of a page: the skip link, the header, then every page of the navigation and sign-out, in order.
        var order: [String] = []
        for _ in 0..<9 {
            try await browser.press(.tab)
            order.append(try await focused(browser))
            let outline = try await browser.execute("return getComputedStyle(document.activeElement).outlineStyle") as? String
            #expect(outline != "none", "\(order.last ?? ""): the focus shows")
        }
        #expect(order == ["Skip to content", "push-service", "Overview", "Jobs", "Compose", "Deliveries", "Devices", "Apps", "Sign out"])
        // Back to Jobs and Enter: the page opens; there the skip link leads to its first field.
        try await browser.press(.tab, .tab, .tab, .tab, .tab, holding: .shift)
        #expect(try await focused(browser) == "Jobs")
        try await browser.execute("document.documentElement.dataset.webdriverLeaving = 'yes'")
        try await browser.press(.enter)
        #expect(try await browser.wait { try await browser.currentURL() == stack.consoleURL + "/jobs" })
        try await browser.press(.tab)
        #expect(try await focused(browser) == "Skip to content")
        try await browser.press(.enter)
        try await browser.press(.tab)
        #expect(try await focused(browser) == "app", "past the header to the first filter")
    }

    @Test func noPageScrollsSidewaysOnAPhone() async throws {
        let stack = try ConsoleStack.shared()
        let browser = stack.browser
        try await stack.signIn()
        let pages = try await Self.everyPage(stack)
        try await browser.emulatePhone(width: 375)
        var checked = 0
        do {
            for page in pages {
                try await page.reach(stack)
                let widths = try #require(
                    try await browser.execute(
                        "const root = document.documentElement; return [root.scrollWidth, root.clientWidth, window.innerWidth]") as? [Int])
                #expect(widths[1] == 375 && widths[2] == 375, "\(page.name): laid out 375 px wide (\(widths))")
                #expect(widths[0] <= widths[1], "\(page.name) scrolls sideways: \(widths[0]) px in a window of \(widths[1])")
                if let folder = ProcessInfo.processInfo.environment["CONSOLE_PHONE_SCREENSHOTS"] {
                    let name = page.name.replacingOccurrences(of: "/", with: "_")
                    try await browser.screenshot().write(to: URL(fileURLWithPath: folder).appendingPathComponent("phone\(name).png"))
                }
                checked += 1
            }
        } catch {
            try await browser.emulatePhone(width: nil)
            throw error
        }
        try await browser.emulatePhone(width: nil)
        #expect(checked == pages.count)
    }
}
