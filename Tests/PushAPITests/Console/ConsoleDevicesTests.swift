import DeviceRegistry
import Foundation
import Hummingbird
import HummingbirdTesting
import TestSupport
import Testing

@testable import PushAPI

/// The devices page over HTTP: one user's devices in an app, why and since when the inactive
/// ones stopped, their last deliveries; and hostile device ids and FCM messages shown as text.
@Suite("Console devices")
struct ConsoleDevicesTests {
    static let scriptPayload = "<script>alert(1)</script>"
    static let attributePayload = #""><img src=x onerror=alert(1)>"#

    static func register(
        _ seed: Seed, app: Int64, user: Int64, token: String, deviceID: String?,
        platform: String = "android"
    ) async throws -> Int64 {
        try await DeviceDirectory(client: seed.client).register(
            DeviceRegistration(token: token, platform: platform, deviceID: deviceID, tokenType: nil),
            userID: user, appID: app, logger: apiLogger
        ).device.id
    }

    /// The HTML of the card of device `id`.
    static func card(_ id: Int64, in html: String) throws -> String {
        let start = try #require(html.range(of: #"<section class="card" aria-labelledby="device-\#(id)">"#))
        return String(html[start.lowerBound...].split(separator: "</section>", maxSplits: 1)[0])
    }

    @Test func everyDeviceOfTheUserShowsWhetherItIsActiveWhyNotSinceWhenAndItsLastDeliveries() async throws {
        let fixture = try await APIFixture.make()
        let (phone, tablet, oldPhone, deliveries) = try await fixture.database.seed { seed in
            let app = fixture.appID
            let phone = try await Self.register(seed, app: app, user: 7, token: "phone-token-0123456789abcdefghij", deviceID: "pixel-8")
            let tablet = try await Self.register(
                seed, app: app, user: 7, token: "tablet-token-0123456789abcdefghij", deviceID: "tab",
                platform: "ios")
            let oldPhone = try await Self.register(seed, app: app, user: 7, token: "old-token-0123456789abcdefghij", deviceID: nil)
            try await seed.run(
                """
                UPDATE push_devices SET is_active = false, deactivated_at = '2026-03-04T05:06:07Z', deactivation_reason = 'unregistered'
                 WHERE id = \(tablet)
                """)
            _ = try await DeviceDirectory(client: seed.client).deactivate(deviceID: oldPhone, userID: 7, appID: app, logger: apiLogger)
            // Not this user's, not this app's: never listed.
            _ = try await Self.register(seed, app: app, user: 8, token: "other-user-token-0123456789", deviceID: "pixel-8")
            let beta = try await seed.app("beta")
            _ = try await Self.register(seed, app: beta, user: 7, token: "other-app-token-0123456789", deviceID: "pixel-8")
            var deliveries: [Int64] = []
            for _ in 1...7 {
                let job = try await seed.job(users: [7])
                deliveries.append(try await seed.delivery(job: job, device: phone, status: .sent, attempts: 1))
            }
            try await seed.delivery(
                job: try await seed.job(users: [7]), device: tablet, status: .failed, errorCode: "UNREGISTERED",
                errorMessage: "Requested entity was not found.", attempts: 1)
            return (phone, tablet, oldPhone, deliveries)
        }
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            let page = try await browser.get(client, "/console/devices?app=wowa&user=7")
            #expect(page.status == .ok)
            let html = page.text
            let listed = html.matches(of: /aria-labelledby="device-(\d+)"/).compactMap { Int64($0.1) }
            #expect(listed == [oldPhone, tablet, phone], "every device of user 7 in wowa, newest registration first")
            #expect(html.contains(#"<a href="/console/devices" aria-current="page">Devices</a>"#))
            #expect(html.contains(#"<option value="wowa" selected>wowa</option>"#) && html.contains(#"value="7""#))

            let phoneCard = try Self.card(phone, in: html)
            #expect(phoneCard.contains(#"<span class="badge ok">active</span>"#) && !phoneCard.contains("Inactive since"))
            #expect(phoneCard.contains("<dt>Device id</dt><dd>pixel-8</dd>"))
            #expect(phoneCard.contains("<code>phone-token-0123…</code> (fcm)"), "the token masked")
            #expect(!html.contains("phone-token-0123456789abcdefghij"))
            let shown = phoneCard.matches(of: /<tr><td>(\d+)<\/td>/).compactMap { Int64($0.1) }
            #expect(shown == Array(deliveries.reversed().prefix(5)), "its last 5 deliveries, newest first")

            let tabletCard = try Self.card(tablet, in: html)
            #expect(tabletCard.contains(#"<span class="badge bad">inactive</span>"#))
            #expect(tabletCard.contains("Inactive since 2026-03-04 05:06:07 UTC ("))
            #expect(
                tabletCard.contains(
                    "<strong>unregistered</strong>, FCM answered UNREGISTERED: the app was uninstalled or the token expired."))
            #expect(tabletCard.contains("<td>UNREGISTERED: Requested entity was not found.</td>"))

            let oldCard = try Self.card(oldPhone, in: html)
            #expect(oldCard.contains("<strong>logout</strong>, the user&#39;s app signed out"))
            #expect(oldCard.contains(#"<span class="muted">none given</span>"#) && oldCard.contains("No deliveries yet."))
            #expect(html.contains(#"href="/console/deliveries?user=7&amp;app=wowa""#))
        }
    }

    @Test func theFormSaysWhatIsMissingNextToItsField() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            let empty = try await browser.get(client, "/console/devices")
            #expect(empty.status == .ok && !empty.text.contains(#"class="error""#))
            let noUser = try await browser.get(client, "/console/devices?app=wowa&user=")
            #expect(noUser.status == .badRequest)
            #expect(noUser.text.contains(#"<p class="error" id="user-error" role="alert">Give a user id.</p>"#))
            #expect(noUser.text.contains(#"aria-invalid="true" aria-describedby="user-error""#) && !noUser.text.contains("app-error"))
            let wrong = try await browser.get(client, "/console/devices?app=nope&user=x")
            #expect(wrong.text.contains(#"<p class="error" id="app-error" role="alert">There is no app nope.</p>"#))
            #expect(wrong.text.contains("A user id is a positive integer."))
            let nobody = try await browser.get(client, "/console/devices?app=wowa&user=404")
            #expect(nobody.status == .ok && nobody.text.contains("User 404 has no devices in wowa."))
        }
    }

    @Test func manyDevicesArePagedByKeyset() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.database.seed { seed in
            try await seed.run(
                """
                INSERT INTO push_devices (user_id, app_id, token, platform, is_active, deactivated_at, deactivation_reason)
                SELECT 5, \(fixture.appID), 'rotated-token-' || g, 'android', false, now(), 'replaced' FROM generate_series(1, 25) g
                """)
        }
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            let first = try await browser.get(client, "/console/devices?app=wowa&user=5")
            let firstIDs = first.text.matches(of: /aria-labelledby="device-(\d+)"/).compactMap { Int64($0.1) }
            #expect(firstIDs.count == 20 && firstIDs == firstIDs.sorted(by: >))
            let older = try #require(first.text.firstMatch(of: /<a class="next" href="([^"]+)">/).map { String($0.1) })
            #expect(older == "/console/devices?app=wowa&amp;user=5&amp;before=\(firstIDs.last!)")
            let second = try await browser.get(client, older.replacingOccurrences(of: "&amp;", with: "&"))
            let secondIDs = second.text.matches(of: /aria-labelledby="device-(\d+)"/).compactMap { Int64($0.1) }
            #expect(secondIDs.count == 5 && secondIDs.allSatisfy { $0 < firstIDs.last! } && !second.text.contains(#"class="next""#))
        }
    }

    /// A device id and an FCM error message holding a script and an attribute break are shown as
    /// text on every page that shows them: the devices page, the deliveries page, the job page.
    @Test func hostileDeviceIDsAndFCMMessagesRenderAsText() async throws {
        let fixture = try await APIFixture.make()
        let job = try await fixture.database.seed { seed in
            let scripted = try await Self.register(
                seed, app: fixture.appID, user: 3, token: "xss-token-one-0123456789",
                deviceID: Self.scriptPayload)
            let broken = try await Self.register(
                seed, app: fixture.appID, user: 3, token: "xss-token-two-0123456789",
                deviceID: Self.attributePayload)
            let job = try await seed.job(users: [3])
            try await seed.delivery(
                job: job, device: scripted, status: .failed, errorCode: "INVALID_ARGUMENT",
                errorMessage: Self.scriptPayload, attempts: 1)
            try await seed.delivery(
                job: job, device: broken, status: .failed, errorCode: "INVALID_ARGUMENT",
                errorMessage: Self.attributePayload, attempts: 1)
            return job
        }
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            let escapedScript = "&lt;script&gt;alert(1)&lt;/script&gt;"
            let escapedAttribute = "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;"
            for uri in ["/console/devices?app=wowa&user=3", "/console/deliveries?user=3", "/console/jobs/\(job)"] {
                let html = try await browser.get(client, uri).text
                #expect(!html.contains(Self.scriptPayload) && !html.contains(Self.attributePayload), "\(uri)")
                #expect(!html.contains("<script") && !html.contains("<img"), "\(uri)")
                #expect(html.contains(escapedScript) && html.contains(escapedAttribute), "\(uri) shows both as text")
            }
            let devices = try await browser.get(client, "/console/devices?app=wowa&user=3").text
            #expect(devices.contains("<dt>Device id</dt><dd>\(escapedScript)</dd>"))
            #expect(devices.contains("<dt>Device id</dt><dd>\(escapedAttribute)</dd>"))
            #expect(devices.contains("<td>INVALID_ARGUMENT: \(escapedAttribute)</td>"))
            let deliveries = try await browser.get(client, "/console/deliveries?user=3").text
            #expect(deliveries.contains(#"<span class="error-text">\#(escapedScript)</span>"#))
        }
    }
}
