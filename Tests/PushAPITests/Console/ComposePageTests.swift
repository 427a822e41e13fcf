import DeviceRegistry
import Foundation
import Hummingbird
import HummingbirdTesting
import TestSupport
import Testing

@testable import PushAPI

/// The compose page through HTTP, signed in, against a real database: what it queues, and that
/// what it refuses is what POST /push/notifications refuses, in the API's words.
@Suite("Console compose page")
struct ComposePageTests {
    /// How the templates escape text (swift-mustache: quotes included).
    static func escaped(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
            .replacingOccurrences(of: "'", with: "&#39;")
    }

    /// A compose form post: the page's own CSRF token, then `fields`.
    static func compose(_ browser: inout ConsoleBrowser, _ client: some TestClientProtocol, _ fields: [(String, String)]) async throws
        -> TestResponse
    {
        let form = try await browser.get(client, "/console/compose")
        let csrf = try #require(ConsoleBrowser.csrfToken(in: form.text))
        return try await browser.post(client, "/console/compose", [("csrf", csrf)] + fields)
    }

    static func jobRow(_ fixture: APIFixture, _ id: Int64) async throws -> String {
        try await fixture.database.text(
            """
            SELECT concat_ws(' | ', user_ids::text, platforms::text, message::text, priority, validate_only, idempotency_key,
                             extract(epoch FROM send_at)::bigint, extract(epoch FROM expires_at - send_at)::bigint)
              FROM push_jobs WHERE id = \(id)
            """)
    }

    @Test func aNotificationToUsersIsQueuedAsTheAPIQueuesItAndItsJobPageOpens() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            let form = try await browser.get(client, "/console/compose?app=wowa")
            #expect(form.status == .ok)
            #expect(form.text.contains(#"<option value="wowa" selected>Wowa (wowa)</option>"#))
            #expect(form.text.contains(#"<a href="/console/compose" aria-current="page">Compose</a>"#))
            for label in [
                "appCode", "userIds", "title", "body", "data", "message", "sendAt", "expiresAt", "ttlSeconds", "priority",
                "idempotencyKey",
            ] {
                #expect(form.text.contains(#"<label for="\#(label)""#), "every input has its label: \(label)")
            }

            let sendAt = "2031-05-01T09:00:00Z"
            let queued = try await Self.compose(
                &browser, client,
                [
                    ("appCode", "wowa"), ("audience", "users"), ("userIds", "1, 2\n3"), ("content", "fields"), ("title", "Sale"),
                    ("body", "Half price"), ("data", "orderId=42\nkind = promo"), ("sendAt", sendAt), ("ttlSeconds", "3600"),
                    ("priority", "normal"), ("dryRun", "on"), ("idempotencyKey", "console-1"), ("action", "send"),
                ])
            #expect(queued.status == .seeOther)
            let location = try #require(queued.headers[.location])
            let id = try #require(Int64(location.replacingOccurrences(of: "/console/jobs/", with: "")))
            let page = try await browser.get(client, location)
            #expect(page.status == .ok && page.text.contains("<h1>Job #\(id)"))

            // The same job asked of the API: the same row but for the key.
            let api = try await client.send(
                .post, "/push/notifications", token: ConsoleBrowser.adminToken,
                json: """
                    {"appCode":"wowa","userIds":[1,2,3],"message":{"notification":{"title":"Sale","body":"Half price"},
                     "data":{"orderId":"42","kind":"promo"}},"sendAt":"\(sendAt)","ttlSeconds":3600,"priority":"normal",
                     "dryRun":true,"idempotencyKey":"api-1"}
                    """)
            #expect(api.status == .accepted, "\(api.text)")
            let apiJob = try #require(api.jobID)
            let row = try await Self.jobRow(fixture, id)
            #expect(row == (try await Self.jobRow(fixture, apiJob)).replacingOccurrences(of: "api-1", with: "console-1"))
            #expect(row.hasPrefix("{1,2,3} | ") && row.contains("| normal | t | console-1 | 1935392400 | 3600"), "\(row)")

            let campaign = try await Self.compose(
                &browser, client,
                [
                    ("appCode", "wowa"), ("audience", "campaign"), ("platforms", "web"), ("platforms", "android"), ("content", "json"),
                    ("message", #"{"data":{"k":"v"}}"#), ("action", "send"),
                ])
            #expect(campaign.status == .seeOther)
            let campaignID = try #require(
                campaign.headers[.location].flatMap { Int64($0.replacingOccurrences(of: "/console/jobs/", with: "")) })
            #expect(
                try await fixture.database.text(
                    "SELECT platforms::text || ' ' || priority || ' ' || (user_ids IS NULL) FROM push_jobs WHERE id = \(campaignID)")
                    == "{android,web} bulk true")
        }
    }

    /// A form, the JSON body it stands for, and the field its refusal is shown at.
    struct Refusal: Sendable, CustomTestStringConvertible {
        let form: [(String, String)]
        let json: String
        let field: String
        var testDescription: String { field + ": " + json }

        static let all: [Refusal] = [
            Refusal(form: [("userIds", "1, x")], json: #""userIds":[1,"x"]"#, field: "userIds"),
            Refusal(form: [("userIds", "1, 0")], json: #""userIds":[1,0]"#, field: "userIds"),
            Refusal(form: [], json: "", field: "audience"),
            Refusal(form: [("userIds", "1"), ("platforms", "ios")], json: #""userIds":[1],"platforms":["ios"]"#, field: "platforms"),
            Refusal(form: [("userIds", "1"), ("sendAt", "tomorrow")], json: #""userIds":[1],"sendAt":"tomorrow""#, field: "sendAt"),
            Refusal(
                form: [("userIds", "1"), ("expiresAt", "2040-01-01T00:00:00Z"), ("ttlSeconds", "60")],
                json: #""userIds":[1],"expiresAt":"2040-01-01T00:00:00Z","ttlSeconds":60"#, field: "expiry"),
            Refusal(form: [("userIds", "1"), ("ttlSeconds", "1.5")], json: #""userIds":[1],"ttlSeconds":"1.5""#, field: "expiry"),
            // The preview once added it to the send time and stopped push-api.
            Refusal(
                form: [("userIds", "1"), ("ttlSeconds", "9223372036854775807")], json: #""userIds":[1],"ttlSeconds":9223372036854775807"#,
                field: "expiry"),
            Refusal(form: [("userIds", "1"), ("priority", "urgent")], json: #""userIds":[1],"priority":"urgent""#, field: "priority"),
            Refusal(
                form: [("userIds", "1"), ("idempotencyKey", String(repeating: "k", count: 201))],
                json: #""userIds":[1],"idempotencyKey":"\#(String(repeating: "k", count: 201))""#, field: "idempotencyKey"),
        ]
    }

    @Test(arguments: Refusal.all)
    func aRefusalIsTheAPIsMessageShownNextToItsField(_ refusal: Refusal) async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            let members = [#""appCode":"wowa""#, refusal.json, #""message":{"notification":{"title":"Hi"}}"#].filter { !$0.isEmpty }
            let api = try await client.send(
                .post, "/push/notifications", token: ConsoleBrowser.adminToken,
                json: "{" + members.joined(separator: ",") + "}")
            #expect(api.status == .badRequest)
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            for action in ["preview", "send"] {
                let page = try await Self.compose(
                    &browser, client,
                    [
                        ("appCode", "wowa"), ("audience", "users"), ("content", "fields"),
                        ("title", "Hi"),
                    ] + refusal.form + [("action", action)])
                #expect(page.status == .badRequest)
                #expect(
                    page.text.contains(#"<p class="error field-error" id="\#(refusal.field)-error">\#(Self.escaped(api.message))</p>"#),
                    "\(action): \(api.message)\n\(page.text)")
                #expect(!page.text.contains("preview-body"))
            }
            #expect(try await fixture.database.text("SELECT count(*)::text FROM push_jobs") == "0")
        }
    }

    /// Refusals the database makes (the app, the message's fields, an expiry in the past) come
    /// when the job is queued; the preview checks what the API checks before the database.
    @Test func refusalsOnlyTheDatabaseMakesAreTheAPIsToo() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            let cases: [(form: [(String, String)], json: String, field: String)] = [
                (
                    [("appCode", "nope"), ("content", "fields"), ("title", "Hi")],
                    #"{"appCode":"nope","userIds":[1],"message":{"notification":{"title":"Hi"}}}"#, "appCode"
                ),
                (
                    [("appCode", "wowa"), ("content", "json"), ("message", #"{"data":{"from":"me"}}"#)],
                    #"{"appCode":"wowa","userIds":[1],"message":{"data":{"from":"me"}}}"#, "message"
                ),
                (
                    [("appCode", "wowa"), ("content", "json"), ("message", #"{"token":"x"}"#)],
                    #"{"appCode":"wowa","userIds":[1],"message":{"token":"x"}}"#, "message"
                ),
                (
                    [("appCode", "wowa"), ("content", "fields"), ("title", "Hi"), ("expiresAt", "2020-01-01T00:00:00Z")],
                    #"{"appCode":"wowa","userIds":[1],"message":{"notification":{"title":"Hi"}},"expiresAt":"2020-01-01T00:00:00Z"}"#,
                    "expiry"
                ),
            ]
            for (form, json, field) in cases {
                let api = try await client.send(.post, "/push/notifications", token: ConsoleBrowser.adminToken, json: json)
                #expect(api.status == .badRequest)
                let page = try await Self.compose(
                    &browser, client, [("audience", "users"), ("userIds", "1")] + form + [("action", "send")])
                #expect(page.status == .badRequest)
                #expect(
                    page.text.contains(#"<p class="error field-error" id="\#(field)-error">\#(Self.escaped(api.message))</p>"#),
                    "\(api.message)")
            }
            // A NUL jsonb cannot hold is refused before the database, by the preview too, at the
            // message's field.
            let nul = #"{"data":{"k":"a\u0000b"}}"#
            let nulAPI = try await client.send(
                .post, "/push/notifications", token: ConsoleBrowser.adminToken,
                json: #"{"appCode":"wowa","userIds":[1],"message":\#(nul)}"#)
            #expect(nulAPI.status == .badRequest && nulAPI.message == "message.data.k must not contain NUL characters (\\u0000)")
            for action in ["preview", "send"] {
                let page = try await Self.compose(
                    &browser, client,
                    [
                        ("appCode", "wowa"), ("audience", "users"), ("userIds", "1"), ("content", "json"), ("message", nul),
                        ("action", action),
                    ])
                #expect(page.status == .badRequest)
                #expect(
                    page.text.contains(#"<p class="error field-error" id="message-error">\#(Self.escaped(nulAPI.message))</p>"#),
                    "\(action): \(page.text)")
                #expect(!page.text.contains("preview-body"))
            }
            // What the API has no field for is the form's own: the message built from its fields.
            let empty = try await Self.compose(
                &browser, client,
                [
                    ("appCode", "wowa"), ("audience", "users"), ("userIds", "1"),
                    ("content", "fields"), ("action", "send"),
                ])
            #expect(empty.text.contains(#"id="title-error">give a title, a body or data (or a raw message as JSON)</p>"#))
            let badData = try await Self.compose(
                &browser, client,
                [
                    ("appCode", "wowa"), ("audience", "users"), ("userIds", "1"),
                    ("content", "fields"), ("data", "a=1\nnothing"), ("action", "send"),
                ])
            #expect(badData.text.contains(#"id="data-error">data line 2 must be KEY=VALUE</p>"#))
            let badJSON = try await Self.compose(
                &browser, client,
                [
                    ("appCode", "wowa"), ("audience", "users"), ("userIds", "1"),
                    ("content", "json"), ("message", "{"), ("action", "send"),
                ])
            #expect(badJSON.text.contains(#"id="message-error">message is not valid JSON: "#))
            #expect(try await fixture.database.text("SELECT count(*)::text FROM push_jobs") == "0")
        }
    }

    @Test func whatWasTypedComesBackAsTextAfterARefusal() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            let hostile = #""><script>alert(1)</script>"#
            let page = try await Self.compose(
                &browser, client,
                [
                    ("appCode", "wowa"), ("audience", "users"), ("userIds", "1, x"), ("content", "fields"), ("title", hostile),
                    ("data", "k=\(hostile)"), ("idempotencyKey", hostile), ("action", "send"),
                ])
            #expect(page.status == .badRequest)
            #expect(!page.text.contains("<script>"))
            #expect(page.text.contains(#"<input id="title" name="title" value="\#(Self.escaped(hostile))""#))
            #expect(page.text.contains("k=\(Self.escaped(hostile))</textarea>"))
            #expect(
                page.text.contains(
                    #"<textarea id="userIds" name="userIds" rows="2" aria-invalid="true" aria-describedby="userIds-error">1, x</textarea>"#)
            )
        }
    }

    @Test func thePreviewIsTheWorkersRequestAndQueuesNothing() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            let page = try await Self.compose(
                &browser, client,
                [
                    ("appCode", "wowa"), ("audience", "campaign"), ("platforms", "android"), ("platforms", "web"), ("content", "fields"),
                    ("title", "Flash <sale>"), ("data", "k=v"), ("sendAt", "2031-05-01T09:00:00Z"), ("ttlSeconds", "600"),
                    ("dryRun", "on"), ("action", "preview"),
                ])
            #expect(page.status == .ok)
            let body = try #require(page.text.firstMatch(of: /<pre class="message" id="preview-body">([^<]*)<\/pre>/).map { String($0.1) })
            let json = try #require(
                try JSONSerialization.jsonObject(
                    with: Data(
                        body.replacingOccurrences(of: "&quot;", with: "\"")
                            .replacingOccurrences(of: "&lt;", with: "<").replacingOccurrences(of: "&gt;", with: ">")
                            .replacingOccurrences(of: "&amp;", with: "&").utf8)) as? [String: Any])
            #expect(json["validate_only"] as? Bool == true, "a dry run")
            let message = try #require(json["message"] as? [String: Any])
            #expect(message["token"] as? String == "DEVICE-TOKEN")
            #expect((message["notification"] as? [String: String])?["title"] == "Flash <sale>")
            #expect((message["data"] as? [String: String]) == ["k": "v"])
            // The expiry as the worker writes it at the first send: 600 s left.
            #expect((message["android"] as? [String: String])?["ttl"] == "600s")
            #expect(((message["webpush"] as? [String: Any])?["headers"] as? [String: String])?["TTL"] == "600")
            #expect(((message["apns"] as? [String: Any])?["headers"] as? [String: String])?["apns-expiration"] == "1935393000")
            #expect(page.text.contains("<tr><td>android</td><td>notification, data, android</td></tr>"))
            #expect(page.text.contains("<tr><td>web</td><td>notification, data, webpush</td></tr>"))
            #expect(!page.text.contains("<tr><td>ios</td>"), "the campaign's platforms only")
            #expect(page.text.contains("POST /v1/projects/PROJECT_ID/messages:send"), "wowa has no credentials yet")
            #expect(page.text.contains(#"<input type="checkbox" name="dryRun" value="on" checked>"#), "the form keeps what was typed")
            // A member set to null is one left out, as FCM reads it: not carried.
            let nulls = try await Self.compose(
                &browser, client,
                [
                    ("appCode", "wowa"), ("audience", "campaign"), ("platforms", "ios"), ("content", "json"),
                    ("message", #"{"notification":null,"data":{"k":"v"},"apns":null}"#), ("action", "preview"),
                ])
            #expect(nulls.status == .ok && nulls.text.contains("<tr><td>ios</td><td>data (no apns block)</td></tr>"), "\(nulls.text)")
            #expect(try await fixture.database.text("SELECT count(*)::text FROM push_jobs") == "0")
        }
    }

    @Test func composingNeedsASessionAndTheFormsCSRFToken() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            let anonymous = try await browser.get(client, "/console/compose")
            #expect(anonymous.status == .seeOther && anonymous.headers[.location] == "/console/sign-in")
            _ = try await browser.signIn(client)
            let fields = [
                ("appCode", "wowa"), ("audience", "users"), ("userIds", "1"), ("content", "fields"), ("title", "Hi"),
                ("action", "send"),
            ]
            let without = try await browser.post(client, "/console/compose", fields)
            #expect(without.status == .forbidden && without.text.contains("security token is missing"))
            let forged = try await browser.post(client, "/console/compose", [("csrf", "forged")] + fields)
            #expect(forged.status == .forbidden)
            #expect(try await fixture.database.text("SELECT count(*)::text FROM push_jobs") == "0")
        }
    }
}
