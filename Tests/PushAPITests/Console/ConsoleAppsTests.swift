import DeviceRegistry
import Foundation
import Hummingbird
import HummingbirdTesting
import NIOCore
import TestSupport
import Testing

@testable import PushAPI

extension ConsoleBrowser {
    /// A part of a multipart form: a text field, or a file when `filename` is given.
    struct Part {
        let name: String
        let value: String
        var filename: String?
    }

    static let boundary = "----ConsoleTestBoundary7MA4YWxkTrZu0gW"

    static func multipartBody(_ parts: [Part]) -> String {
        parts.map { part in
            let disposition = "form-data; name=\"\(part.name)\"" + (part.filename.map { "; filename=\"\($0)\"" } ?? "")
            let type = part.filename == nil ? "" : "Content-Type: application/json\r\n"
            return "--\(boundary)\r\nContent-Disposition: \(disposition)\r\n\(type)\r\n\(part.value)\r\n"
        }.joined() + "--\(boundary)--\r\n"
    }

    /// Posts a form as a browser posts one with `enctype="multipart/form-data"`.
    mutating func postMultipart(_ client: some TestClientProtocol, _ uri: String, _ parts: [Part]) async throws -> TestResponse {
        var headers = cookieHeader
        headers[.contentType] = "multipart/form-data; boundary=\(Self.boundary)"
        let response = try await client.execute(
            uri: uri, method: .post, headers: headers,
            body: ByteBuffer(string: Self.multipartBody(parts)))
        keep(response)
        return response
    }
}

/// The apps page over HTTP: credentials status without the key, credentials set from an
/// uploaded or pasted service-account JSON checked as pushctl checks it, apps added.
@Suite("Console apps")
struct ConsoleAppsTests {
    static func credentials(_ fixture: APIFixture, _ code: String) async throws -> String {
        try await fixture.database.text(
            "SELECT coalesce(fcm_project_id, '-') || ' ' || coalesce(fcm_client_email, '-') FROM apps WHERE code = \(code)")
    }

    @Test func eachAppShowsItsCredentialsAndWhetherASendProvedThemNeverTheKey() async throws {
        let fixture = try await APIFixture.make()
        let account = try ServiceAccountFile.make(projectID: "wowa-prod")
        try await fixture.database.seed { seed in
            let directory = AppDirectory(client: seed.client, logger: apiLogger)
            _ = try await directory.setCredentials(
                code: "wowa", serviceAccount: try ServiceAccount(json: Data(contentsOf: URL(fileURLWithPath: account.path))))
            try await seed.run("UPDATE apps SET fcm_proven_project_id = fcm_project_id WHERE code = 'wowa'")
            _ = try await directory.add(code: "beta", name: "Beta", serviceAccount: nil)
            _ = try await directory.setRate(code: "beta", perSecond: 300)
        }
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            let page = try await browser.get(client, "/console/apps")
            #expect(page.status == .ok)
            let html = page.text
            #expect(html.contains(#"<a href="/console/apps" aria-current="page">Apps</a>"#))
            #expect(html.contains("<dt>FCM project</dt><dd>wowa-prod</dd>"))
            #expect(html.contains("<dt>Client email</dt><dd>\(account.clientEmail)</dd>"))
            #expect(html.contains("project proven by a send"))
            #expect(
                html.contains("no credentials: its jobs fail") && html.contains("<dt>Send rate</dt><dd>at most 300 sends per second</dd>"))
            #expect(!html.contains("PRIVATE KEY") && !html.contains(account.privateKeyID), "never the key")
            let keyBody = account.privateKeyPEM.split(separator: "\n")[1]
            #expect(!html.contains(keyBody))
            #expect(html.contains(#"action="/console/apps/wowa/credentials" enctype="multipart/form-data""#))
            #expect(html.contains(#"action="/console/apps" enctype="multipart/form-data""#))
            #expect(html.matches(of: /name="csrf"/).count == 6, "sign-out, two credentials forms, two rate forms and adding")
            #expect(
                html.contains(
                    #"<input id="rate-\#(fixture.appID)" name="perSecond" type="text" inputmode="numeric" autocomplete="off" value="""#))
        }
    }

    @Test func credentialsAreSetFromAnUploadedFileOrPastedJSON() async throws {
        let fixture = try await APIFixture.make()
        let (uploaded, pasted) = (
            try ServiceAccountFile.make(projectID: "wowa-upload"), try ServiceAccountFile.make(projectID: "wowa-paste")
        )
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            let csrf = try await browser.csrf(client)
            let file = try String(contentsOfFile: uploaded.path, encoding: .utf8)
            let set = try await browser.postMultipart(
                client, "/console/apps/wowa/credentials",
                [
                    .init(name: "csrf", value: csrf), .init(name: "serviceAccountFile", value: file, filename: "wowa-upload.json"),
                    .init(name: "serviceAccountJSON", value: ""),
                ])
            #expect(set.status == .seeOther && set.headers[.location] == "/console/apps?updated=wowa")
            #expect(try await Self.credentials(fixture, "wowa") == "wowa-upload \(uploaded.clientEmail)")
            #expect(try await fixture.database.text("SELECT fcm_private_key FROM apps WHERE code = 'wowa'") == uploaded.privateKeyPEM)
            let after = try await browser.get(client, "/console/apps?updated=wowa")
            #expect(after.text.contains("Credentials of wowa set: \(uploaded.clientEmail) (project wowa-upload)."))
            #expect(after.text.contains("no send has succeeded yet"))

            let json = try String(contentsOfFile: pasted.path, encoding: .utf8)
            let replaced = try await browser.postMultipart(
                client, "/console/apps/wowa/credentials",
                [
                    .init(name: "csrf", value: csrf), .init(name: "serviceAccountFile", value: "", filename: ""),
                    .init(name: "serviceAccountJSON", value: json),
                ])
            #expect(replaced.status == .seeOther)
            #expect(try await Self.credentials(fixture, "wowa") == "wowa-paste \(pasted.clientEmail)")
        }
    }

    @Test func aRefusedServiceAccountIsExplainedNextToItsFieldAsPushctlExplainsIt() async throws {
        let fixture = try await APIFixture.make()
        let account = try ServiceAccountFile.make(projectID: "wowa-prod")
        let valid = try String(contentsOfFile: account.path, encoding: .utf8)
        let cases: [(String, ServiceAccountError?)] = [
            (#"{"type": "service_account", "project_id": "#, nil),
            ("[1, 2]", .notAnObject),
            (#"{"type":"authorized_user","project_id":"p","client_email":"a@b","private_key":"k"}"#, .wrongType("authorized_user")),
            (#"{"project_id":"p","private_key":"k"}"#, .missingField("client_email")),
            (
                #"{"project_id":"p","client_email":"a@b","private_key":"-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n"}"#,
                .unreadablePrivateKey
            ),
        ]
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            let csrf = try await browser.csrf(client)
            for (json, expected) in cases {
                let refused = try await browser.postMultipart(
                    client, "/console/apps/wowa/credentials",
                    [
                        .init(name: "csrf", value: csrf), .init(name: "serviceAccountFile", value: json, filename: "key.json"),
                    ])
                #expect(refused.status == .badRequest, "\(json)")
                let message: String
                do throws(ServiceAccountError) {
                    _ = try ServiceAccount(json: Data(json.utf8))
                    Issue.record("\(json) was accepted")
                    continue
                } catch {
                    message = error.description
                    if let expected { #expect(error == expected) }
                }
                let escaped = message.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "'", with: "&#39;")
                    .replacingOccurrences(of: "\"", with: "&quot;").replacingOccurrences(of: "<", with: "&lt;")
                    .replacingOccurrences(of: ">", with: "&gt;")
                #expect(
                    refused.text.contains(#"<p class="error" id="credentials-error-\#(fixture.appID)" role="alert">\#(escaped)</p>"#),
                    "\(json): \(refused.text)")
                #expect(refused.text.contains(#"aria-describedby="credentials-error-\#(fixture.appID)""#))
            }
            let both = try await browser.postMultipart(
                client, "/console/apps/wowa/credentials",
                [
                    .init(name: "csrf", value: csrf), .init(name: "serviceAccountFile", value: valid, filename: "key.json"),
                    .init(name: "serviceAccountJSON", value: valid),
                ])
            #expect(both.status == .badRequest && both.text.contains("Give either a file or pasted JSON, not both."))
            #expect(!both.text.contains("PRIVATE KEY"), "the refused key is not echoed back")
            let neither = try await browser.postMultipart(client, "/console/apps/wowa/credentials", [.init(name: "csrf", value: csrf)])
            #expect(neither.status == .badRequest && neither.text.contains("Choose the service-account JSON file, or paste it."))
            #expect(try await Self.credentials(fixture, "wowa") == "- -", "nothing was set")

            let unknown = try await browser.postMultipart(
                client, "/console/apps/nope/credentials",
                [
                    .init(name: "csrf", value: csrf), .init(name: "serviceAccountJSON", value: valid),
                ])
            #expect(unknown.status == .notFound && unknown.text.contains("There is no app nope."))
        }
    }

    @Test func appsAreAddedWithOrWithoutCredentialsAndRefusalsNameTheirField() async throws {
        let fixture = try await APIFixture.make()
        let account = try ServiceAccountFile.make(projectID: "news-prod")
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            let csrf = try await browser.csrf(client)
            let added = try await browser.postMultipart(
                client, "/console/apps",
                [
                    .init(name: "csrf", value: csrf), .init(name: "code", value: "news"), .init(name: "name", value: "News <daily>"),
                    .init(
                        name: "serviceAccountFile", value: try String(contentsOfFile: account.path, encoding: .utf8), filename: "news.json"),
                ])
            #expect(added.status == .seeOther && added.headers[.location] == "/console/apps?added=news")
            #expect(try await Self.credentials(fixture, "news") == "news-prod \(account.clientEmail)")
            let page = try await browser.get(client, "/console/apps?added=news")
            #expect(page.text.contains("App news added.") && page.text.contains("News &lt;daily&gt;"))
            #expect(
                !(try await browser.get(client, "/console/apps?added=ghost")).text.contains("ghost"),
                "a notice only for an app that exists")

            let bare = try await browser.postMultipart(
                client, "/console/apps",
                [
                    .init(name: "csrf", value: csrf), .init(name: "code", value: "bare"), .init(name: "name", value: "Bare"),
                    .init(name: "serviceAccountFile", value: "", filename: ""), .init(name: "serviceAccountJSON", value: "  "),
                ])
            #expect(bare.status == .seeOther)
            #expect(try await Self.credentials(fixture, "bare") == "- -")

            let duplicate = try await browser.postMultipart(
                client, "/console/apps",
                [
                    .init(name: "csrf", value: csrf), .init(name: "code", value: "news"), .init(name: "name", value: "Again"),
                ])
            #expect(duplicate.status == .badRequest)
            #expect(
                duplicate.text.contains(
                    #"<p class="error" id="code-error" role="alert">an app with code &#39;news&#39; already exists</p>"#))
            #expect(duplicate.text.contains(#"value="news""#) && duplicate.text.contains(#"value="Again""#), "what was typed stays")

            let invalid = try await browser.postMultipart(
                client, "/console/apps",
                [
                    .init(name: "csrf", value: csrf), .init(name: "code", value: "Bad Code"), .init(name: "name", value: "x"),
                    .init(name: "serviceAccountJSON", value: "{}"),
                ])
            #expect(invalid.status == .badRequest)
            #expect(
                invalid.text.contains(AppDirectoryError.invalidCode("Bad Code").description.replacingOccurrences(of: "'", with: "&#39;")))
            #expect(
                invalid.text.contains(
                    #"<p class="error" id="account-error" role="alert">service account file lacks &#39;project_id&#39;</p>"#))

            // Empty, or with a NUL PostgreSQL's text cannot hold: refused at the field, not a 500.
            for (code, name) in [("unnamed", ""), ("nul", "Con\u{0}sole")] {
                let refused = try await browser.postMultipart(
                    client, "/console/apps",
                    [.init(name: "csrf", value: csrf), .init(name: "code", value: code), .init(name: "name", value: name)])
                #expect(refused.status == .badRequest, "\(refused.text)")
                #expect(
                    refused.text.contains(
                        #"<p class="error" id="name-error" role="alert">app name must be 1 to 200 characters, without NUL</p>"#))
            }
            #expect(try await fixture.database.text("SELECT string_agg(code, ',' ORDER BY code) FROM apps") == "bare,news,wowa")
        }
    }

    /// A form whose text is not UTF-8 (`%FF`, or such bytes in a multipart field) is refused
    /// whole, and nothing is stored: before, `%FF` became an app's name as those three characters.
    @Test func aFormThatIsNotUTF8IsRefusedAndChangesNothing() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            let csrf = try await browser.csrf(client)
            var headers = browser.cookieHeader
            headers[.contentType] = "application/x-www-form-urlencoded"
            let urlencoded = try await client.execute(
                uri: "/console/apps", method: .post, headers: headers, body: ByteBuffer(string: "csrf=\(csrf)&code=odd&name=x%FF"))
            #expect(
                urlencoded.status == .badRequest && urlencoded.text.contains("the form&#39;s fields must be UTF-8 text"),
                "\(urlencoded.text)")
            // The name's last byte is 0xFF, which no UTF-8 text holds.
            var body = Array(
                ConsoleBrowser.multipartBody([
                    .init(name: "csrf", value: csrf), .init(name: "code", value: "odd"), .init(name: "name", value: "x~"),
                ]).utf8)
            body[try #require(body.firstIndex(of: UInt8(ascii: "~")))] = 0xFF
            headers[.contentType] = "multipart/form-data; boundary=\(ConsoleBrowser.boundary)"
            let multipart = try await client.execute(uri: "/console/apps", method: .post, headers: headers, body: ByteBuffer(bytes: body))
            #expect(multipart.status == .badRequest && multipart.text.contains("not UTF-8 text"), "\(multipart.text)")
            #expect(try await fixture.database.text("SELECT string_agg(code, ',' ORDER BY code) FROM apps") == "wowa")
        }
    }

    static func rate(_ fixture: APIFixture) async throws -> String {
        try await fixture.database.text("SELECT coalesce(max_sends_per_second::text, 'unlimited') FROM apps WHERE code = 'wowa'")
    }

    static func escaped(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "'", with: "&#39;")
    }

    @Test func anAppsSendRateIsCappedAndLiftedAsPushctlSetsIt() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            let csrf = try await browser.csrf(client)
            let before = try await browser.get(client, "/console/apps")
            #expect(before.text.contains(#"<dt>Send rate</dt><dd>unlimited</dd>"#) && !before.text.contains("Lift the cap"))

            let capped = try await browser.post(
                client, "/console/apps/wowa/rate", [("csrf", csrf), ("perSecond", " 300 "), ("cap", "set")])
            #expect(capped.status == .seeOther && capped.headers[.location] == "/console/apps?rate=wowa")
            #expect(try await Self.rate(fixture) == "300")
            let after = try await browser.get(client, "/console/apps?rate=wowa")
            #expect(after.text.contains("Send rate of wowa: at most 300 sends per second."))
            #expect(after.text.contains(#"<dt>Send rate</dt><dd>at most 300 sends per second</dd>"#))
            #expect(
                after.text.contains(
                    #"id="rate-\#(fixture.appID)" name="perSecond" type="text" inputmode="numeric" autocomplete="off" value="300""#))
            #expect(after.text.contains(#"<button type="submit" name="cap" value="lift" class="button">Lift the cap</button>"#))

            let lifted = try await browser.post(client, "/console/apps/wowa/rate", [("csrf", csrf), ("perSecond", "300"), ("cap", "lift")])
            #expect(lifted.status == .seeOther && lifted.headers[.location] == "/console/apps?rate=wowa")
            #expect(try await Self.rate(fixture) == "unlimited")
            #expect((try await browser.get(client, "/console/apps?rate=wowa")).text.contains("Send rate of wowa: unlimited."))
        }
    }

    @Test func aRefusedRateIsExplainedNextToItsFieldAndChangesNothing() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.database.seed { seed in
            _ = try await AppDirectory(client: seed.client, logger: apiLogger).setRate(code: "wowa", perSecond: 50)
        }
        // Out of range: the words of AppDirectory.setRate, which pushctl app set-rate runs too.
        let cases: [(String, String)] = [
            ("-5", AppDirectoryError.invalidRate(-5).description), ("0", AppDirectoryError.invalidRate(0).description),
            ("2147483648", AppDirectoryError.invalidRate(2_147_483_648).description),
            ("abc", "the send rate must be a whole number of sends per second, not 'abc'"),
            ("1.5", "the send rate must be a whole number of sends per second, not '1.5'"),
            ("1e3", "the send rate must be a whole number of sends per second, not '1e3'"),
            ("", "Give the most sends per second, a whole number from 1 (or lift the cap)."),
        ]
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            let csrf = try await browser.csrf(client)
            for (typed, message) in cases {
                let refused = try await browser.post(
                    client, "/console/apps/wowa/rate", [("csrf", csrf), ("perSecond", typed), ("cap", "set")])
                #expect(refused.status == .badRequest, "\(typed)")
                #expect(
                    refused.text.contains(
                        #"<p class="error" id="rate-error-\#(fixture.appID)" role="alert">\#(Self.escaped(message))</p>"#),
                    "\(typed): \(refused.text)")
                #expect(
                    refused.text.contains(
                        #"value="\#(typed)" aria-describedby="rate-hint-\#(fixture.appID) rate-error-\#(fixture.appID)" aria-invalid="true">"#
                    ),
                    "what was typed stays, tied to its refusal")
                #expect(try await Self.rate(fixture) == "50", "\(typed) changed nothing")
            }
            #expect(AppDirectoryError.invalidRate(-5).description == "the send rate must be 1 to 2147483647 sends per second, not -5")

            let hostile = try await browser.post(
                client, "/console/apps/wowa/rate", [("csrf", csrf), ("perSecond", #"<b>"5"</b>"#), ("cap", "set")])
            #expect(hostile.status == .badRequest && hostile.text.contains("not &#39;&lt;b&gt;&quot;5&quot;&lt;/b&gt;&#39;"))
            #expect(!hostile.text.contains("<b>"))
            let noChoice = try await browser.post(client, "/console/apps/wowa/rate", [("csrf", csrf), ("perSecond", "5")])
            #expect(noChoice.status == .badRequest && noChoice.text.contains("cap must be set or lift"))
            let unknown = try await browser.post(client, "/console/apps/nope/rate", [("csrf", csrf), ("perSecond", "5"), ("cap", "set")])
            #expect(unknown.status == .notFound && unknown.text.contains("There is no app nope."))
            let unknownAndRefused = try await browser.post(
                client, "/console/apps/nope/rate", [("csrf", csrf), ("perSecond", "-1"), ("cap", "set")])
            #expect(unknownAndRefused.status == .notFound)
            #expect(try await Self.rate(fixture) == "50")
        }
    }

    @Test func aFormWithoutItsCSRFTokenChangesNothing() async throws {
        let fixture = try await APIFixture.make()
        let account = try ServiceAccountFile.make(projectID: "csrf-prod")
        let json = try String(contentsOfFile: account.path, encoding: .utf8)
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            for (uri, parts) in [
                ("/console/apps/wowa/credentials", [ConsoleBrowser.Part(name: "serviceAccountJSON", value: json)]),
                ("/console/apps", [.init(name: "code", value: "sneaky"), .init(name: "name", value: "Sneaky")]),
            ] {
                let missing = try await browser.postMultipart(client, uri, parts)
                #expect(missing.status == .forbidden, "\(uri)")
                let forged = try await browser.postMultipart(client, uri, parts + [.init(name: "csrf", value: "forged")])
                #expect(forged.status == .forbidden, "\(uri)")
                let urlencoded = try await browser.post(client, uri, parts.map { ($0.name, $0.value) })
                #expect(urlencoded.status == .forbidden, "\(uri)")
            }
            for fields in [[("perSecond", "5"), ("cap", "set")], [("perSecond", "5"), ("cap", "set"), ("csrf", "forged")]] {
                let refused = try await browser.post(client, "/console/apps/wowa/rate", fields)
                #expect(refused.status == .forbidden)
            }
            #expect(try await Self.credentials(fixture, "wowa") == "- -")
            #expect(try await fixture.database.text("SELECT string_agg(code, ',') FROM apps") == "wowa")
            #expect(try await Self.rate(fixture) == "unlimited")
        }
    }
}
