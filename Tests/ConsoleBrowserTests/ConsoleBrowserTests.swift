import AsyncHTTPClient
import Foundation
import NIOCore
import NIOFoundationCompat
import TestSupport
import Testing

/// The console in a real browser (headless Chromium through chromedriver) against push-api,
/// push-worker and fcm-emulator as deployed: what an admin does, and what the browser itself
/// enforces (cookie flags, escaping, CSRF on a real form post).
@Suite(
    "Console in a browser", .serialized, .timeLimit(.minutes(3)),
    .enabled("needs Debian's chromium and chromium-driver, which are not installed and cannot be (no apt-get as root)") {
        await ChromeDriver.availability() == nil
    },
    .consoleStack)
struct ConsoleBrowserTests {
    @Test func aWrongTokenIsRefusedWithItsMessageAndTheAdminTokenSignsIn() async throws {
        let stack = try ConsoleStack.shared()
        let browser = stack.browser
        try await browser.deleteAllCookies()
        try await stack.open("/jobs")
        #expect(try await browser.currentURL() == stack.consoleURL + "/sign-in", "a page without a session asks to sign in")
        try await browser.type("not-the-admin-token", into: "#token")
        try await browser.clickToNavigate("form button[type=submit]")
        #expect(try await browser.text(of: "#token-error") == "That is not the admin token (PUSH_ADMIN_TOKEN).")
        #expect(try await browser.property("ariaInvalid", of: try await browser.find("#token")) as? String == "true")
        try await browser.type(ConsoleStack.adminToken, into: "#token")
        try await browser.clickToNavigate("form button[type=submit]")
        #expect(try await browser.currentURL() == stack.consoleURL)
        #expect(try await browser.text(of: "h1") == "Overview")
        #expect(try await browser.text(of: "main").contains("Demo"))
    }

    @Test func theSessionCookieIsHttpOnlyAndSameSiteStrict() async throws {
        let stack = try ConsoleStack.shared()
        try await stack.signIn()
        let session = try #require(try await stack.browser.cookies().first { $0["name"] as? String == "push_console_session" })
        #expect(session["httpOnly"] as? Bool == true)
        #expect(session["sameSite"] as? String == "Strict")
        #expect(session["path"] as? String == "/console")
        #expect(session["secure"] as? Bool == false, "served over plain HTTP here; Secure behind TLS")
        // The page's own script cannot read it.
        let visible = try await stack.browser.execute("return document.cookie") as? String ?? ""
        #expect(!visible.contains("push_console_session"), "\(visible)")
    }

    @Test func aCampaignComposedInTheConsoleReachesTheEmulatorAndItsJobPageGoesTo100Percent() async throws {
        let stack = try ConsoleStack.shared()
        let tokens = (1...3).map { "browser-campaign-android-\($0)-\(UUID().uuidString.prefix(8))" }
        for (index, token) in tokens.enumerated() { try await stack.register(token: token, user: 100 + Int64(index)) }
        let iosToken = "browser-campaign-ios-\(UUID().uuidString.prefix(8))"
        try await stack.register(token: iosToken, user: 110, platform: "ios")
        try await stack.signIn()
        let browser = stack.browser
        try await stack.open("/compose?app=demo")
        try await browser.click("input[name=audience][value=campaign]")
        try await browser.click("input[name=platforms][value=android]")
        try await browser.type("Console campaign", into: "#title")
        try await browser.type("Sent from the browser", into: "#body")
        try await browser.type("origin=console", into: "#data")
        try await browser.clickToNavigate("button[value=preview]")
        #expect(try await browser.text(of: "#preview-body").contains(#""title" : "Console campaign""#))
        try await browser.clickToNavigate("button[value=send]")

        let url = try await browser.currentURL()
        let jobID = try #require(url.firstMatch(of: /\/console\/jobs\/(\d+)$/).flatMap { Int64($0.1) }, "\(url)")
        // The page reloads itself while the job runs: wait for the browser to show it done.
        let done = try await browser.wait(for: .seconds(20)) {
            let (heading, progress) = (try await browser.text(of: "h1"), try await browser.text(of: ".progress-line"))
            return heading.hasSuffix("completed") && progress.contains("100 %")
        }
        let shown = try await browser.text(of: "main")
        #expect(done, "job \(jobID) did not reach 100 %: \(shown)")
        #expect(try await browser.text(of: ".progress-line").contains("3/3"))
        for token in tokens { #expect(try await stack.emulatorAccepted(token: token) == 1, "\(token)") }
        #expect(try await stack.emulatorAccepted(token: iosToken) == 0, "android only")
        let last = try #require(try await stack.emulatorJSON("/emulator/messages?token=\(tokens[0])") as? [String: Any])
        #expect((last["request_body"] as? String)?.contains("Console campaign") == true)
    }

    @Test func aScheduledJobCancelledFromTheConsoleIsNeverSent() async throws {
        let stack = try ConsoleStack.shared()
        let (cancelled, control) = ("browser-cancelled-\(UUID().uuidString.prefix(8))", "browser-control-\(UUID().uuidString.prefix(8))")
        try await stack.register(token: cancelled, user: 200)
        try await stack.register(token: control, user: 201)
        try await stack.signIn()
        let browser = stack.browser
        let sendAt = ConsoleStack.iso(Date().addingTimeInterval(4))

        func schedule(user: Int64, title: String) async throws -> Int64 {
            try await stack.open("/compose?app=demo")
            try await browser.type("\(user)", into: "#userIds")
            try await browser.type(title, into: "#title")
            try await browser.type(sendAt, into: "#sendAt")
            try await browser.clickToNavigate("button[value=send]")
            let url = try await browser.currentURL()
            let shown = try await browser.text(of: "main")
            return try #require(url.firstMatch(of: /\/console\/jobs\/(\d+)$/).flatMap { Int64($0.1) }, "\(url): \(shown)")
        }
        let job = try await schedule(user: 200, title: "Never sent")
        #expect(try await browser.text(of: "h1") == "Job #\(job) queued")
        try await browser.clickToNavigate("a.button.danger")
        #expect(try await browser.text(of: "h1") == "Cancel job #\(job)?")
        try await browser.clickToNavigate("button.danger")
        #expect(try await browser.text(of: "h1") == "Job #\(job) cancelled")
        // The same schedule, not cancelled, is sent: the worker was there to send the other.
        let controlJob = try await schedule(user: 201, title: "Sent on time")
        let sent = try await browser.wait(for: .seconds(20)) { try await stack.emulatorAccepted(token: control) == 1 }
        #expect(sent, "job \(controlJob) was not sent")
        try await Task.sleep(for: .seconds(1))
        #expect(try await stack.emulatorAccepted(token: cancelled) == 0)
        #expect(try await stack.text("SELECT count(*)::text FROM push_deliveries WHERE job_id = \(job)") == "0")
        #expect(try await stack.text("SELECT status FROM push_jobs WHERE id = \(job)") == "cancelled")
    }

    @Test func aFormPostedWithoutItsCSRFTokenIsRefused() async throws {
        let stack = try ConsoleStack.shared()
        try await stack.signIn()
        let browser = stack.browser
        let before = try await stack.text("SELECT count(*)::text FROM push_jobs")
        try await stack.open("/compose?app=demo")
        try await browser.type("1", into: "#userIds")
        try await browser.type("No token", into: "#title")
        // What a forged post from another site lacks: the form's hidden token.
        try await browser.execute("document.querySelector('form.compose input[name=csrf]').remove()")
        try await browser.clickToNavigate("button[value=send]")
        #expect(try await browser.text(of: "h1") == "403 Forbidden")
        #expect(try await browser.text(of: ".notice").contains("security token is missing"))
        #expect(try await stack.text("SELECT count(*)::text FROM push_jobs") == before, "nothing queued")
    }

    @Test func anXSSPayloadInAMessageTitleStaysText() async throws {
        let stack = try ConsoleStack.shared()
        try await stack.signIn()
        let browser = stack.browser
        let payload = #"<img src=x onerror="alert('title')"><script>alert("title")</script>"#
        try await stack.open("/compose?app=demo")
        try await browser.type("999", into: "#userIds")
        try await browser.type(payload, into: "#title")
        try await browser.click("input[name=dryRun]")
        try await browser.clickToNavigate("button[value=send]")
        #expect(
            try await browser.text(of: "pre.message").contains(#"<img src=x onerror=\"alert('title')\"><script>alert(\"title\")</script>"#),
            "the title shows as the text it is")
        #expect(try await browser.openDialogText() == nil, "no script ran")
        #expect(try await browser.findAll("main img, main script").isEmpty)
        try await stack.open("/jobs")
        #expect(try await browser.text(of: "tbody tr td:nth-child(4)") == payload)
        #expect(try await browser.openDialogText() == nil)
        #expect(try await browser.findAll("main img, main script").isEmpty)
    }

    /// Queues a notification to `users` through the compose form and waits for its job page to
    /// show it completed; returns the job id.
    func composeAndWait(_ stack: ConsoleStack, users: String, title: String) async throws -> Int64 {
        let browser = stack.browser
        try await stack.open("/compose?app=demo")
        try await browser.type(users, into: "#userIds")
        try await browser.type(title, into: "#title")
        try await browser.clickToNavigate("button[value=send]")
        let url = try await browser.currentURL()
        let job = try #require(url.firstMatch(of: /\/console\/jobs\/(\d+)$/).flatMap { Int64($0.1) }, "\(url)")
        let done = try await browser.wait(for: .seconds(20)) { try await browser.text(of: "h1").hasSuffix("completed") }
        #expect(done, "job \(job) did not complete")
        return job
    }

    @Test func aDeviceDeactivatedAsUnregisteredShowsWhyAndAHostileDeviceIdStaysText() async throws {
        let stack = try ConsoleStack.shared()
        try await stack.signIn()
        let browser = stack.browser
        let payload = #"pixel"><img src=x onerror="alert('device')"><script>alert(1)</script>"#
        // The emulator answers UNREGISTERED for these tokens, and the worker deactivates the device.
        try await stack.register(token: "unregistered-browser-\(UUID().uuidString.prefix(8))", user: 300, deviceID: payload)
        _ = try await composeAndWait(stack, users: "300", title: "To a dead token")
        try await stack.open("/devices?app=demo&user=300")
        let reason = try await browser.text(of: ".deactivation")
        #expect(reason.contains("unregistered"), "\(reason)")
        #expect(try await browser.text(of: "main").contains(payload), "the device id shows as the text it is")
        #expect(try await browser.openDialogText() == nil)
        #expect(try await browser.findAll("main img, main script").isEmpty)
    }

    @Test func deliveriesFilteredByJobAndStatusAndExportedAsCSV() async throws {
        let stack = try ConsoleStack.shared()
        try await stack.signIn()
        let browser = stack.browser
        let (dead, live) = ("unregistered-csv-\(UUID().uuidString.prefix(8))", "browser-csv-\(UUID().uuidString.prefix(8))")
        try await stack.register(token: dead, user: 310)
        try await stack.register(token: live, user: 311)
        let job = try await composeAndWait(stack, users: "310, 311", title: "Audit me")
        try await stack.open("/deliveries")
        try await browser.type("\(job)", into: "#job")
        try await browser.execute("document.querySelector('#status').value = 'failed'")
        try await browser.clickToNavigate("form.filters button[type=submit]")
        let rows = try await browser.findAll("main tbody tr")
        #expect(rows.count == 1, "the failed delivery of job \(job) only")
        let row = try await browser.text(rows[0])
        #expect(row.contains("UNREGISTERED") && row.contains("310") && !row.contains(dead), "tokens masked: \(row)")

        // The export link of this filter, fetched with the browser's session cookie.
        let href = try #require(try await browser.property("href", of: try await browser.find("a[download]")) as? String)
        #expect(href.contains("job=\(job)") && href.contains("status=failed"))
        let session = try #require(
            try await browser.cookies().first { $0["name"] as? String == "push_console_session" }?["value"] as? String)
        var request = HTTPClientRequest(url: href)
        request.headers.add(name: "Cookie", value: "push_console_session=\(session)")
        let response = try await stack.https.execute(request, timeout: .seconds(10))
        #expect(response.headers.first(name: "Content-Type")?.hasPrefix("text/csv") == true)
        let csv = String(buffer: try await response.body.collect(upTo: 1 << 20))
        let lines = csv.split(whereSeparator: \.isNewline)
        #expect(lines.count == 2, "\(csv)")
        #expect(lines.first?.hasPrefix("id,job_id,user_id,app,platform,token,status,attempts,updated_at,error_code") == true)
        let cells = lines.last.map { $0.split(separator: ",", omittingEmptySubsequences: false).map(String.init) } ?? []
        #expect(
            cells.count > 9 && cells[1] == "\(job)" && cells[2] == "310" && cells[6] == "failed" && cells[9] == "UNREGISTERED", "\(csv)")
        #expect(!csv.contains(dead) && !csv.contains(live))
    }

    /// The main pages as an admin sees them, at a laptop's width: written to the folder
    /// `CONSOLE_SCREENSHOTS` names (docs/images for the docs), else only checked to be images.
    @Test func screenshotsOfTheMainPages() async throws {
        let stack = try ConsoleStack.shared()
        try await stack.signIn()
        let browser = stack.browser
        let job = try await stack.text("SELECT max(id)::text FROM push_jobs WHERE status = 'completed' AND platforms IS NOT NULL")
        var shots: [(String, Data)] = []
        for (name, path) in [
            ("console-overview", ""), ("console-jobs", "/jobs"), ("console-job", "/jobs/\(job)"),
            ("console-deliveries", "/deliveries"), ("console-devices", "/devices?app=demo&user=300"),
        ] {
            try await stack.open(path)
            shots.append((name, try await browser.fullPageScreenshot()))
        }
        try await stack.open("/compose?app=demo")
        try await browser.click("input[name=audience][value=campaign]")
        try await browser.click("input[name=platforms][value=android]")
        try await browser.click("input[name=platforms][value=ios]")
        try await browser.type("Spring sale", into: "#title")
        try await browser.type("Half price on everything until Sunday", into: "#body")
        try await browser.type("screen=offers", into: "#data")
        try await browser.type("86400", into: "#ttlSeconds")
        try await browser.clickToNavigate("button[value=preview]")
        shots.append(("console-compose", try await browser.fullPageScreenshot()))
        try await browser.deleteAllCookies()
        try await stack.open("/sign-in")
        shots.append(("console-sign-in", try await browser.screenshot()))

        let folder = ProcessInfo.processInfo.environment["CONSOLE_SCREENSHOTS"].map { URL(fileURLWithPath: $0) }
        for (name, png) in shots {
            #expect(png.starts(with: [0x89, 0x50, 0x4E, 0x47]) && png.count > 10_000, "\(name) is a PNG of a page")
            if let folder { try png.write(to: folder.appendingPathComponent("\(name).png")) }
        }
    }
}
