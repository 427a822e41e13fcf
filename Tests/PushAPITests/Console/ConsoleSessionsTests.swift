import Foundation
import Hummingbird
import HummingbirdTesting
import TestSupport
import Testing

@testable import PushAPI

/// Sign-in, the session cookie, sign-out and the CSRF tokens, through HTTP against push-api.
@Suite("Console sessions")
struct ConsoleSessionsTests {
    @Test func withoutAnAdminTokenTheConsoleAnswersLikeAnUnknownPath() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test { client in
            let unknown = try await client.execute(uri: "/no/such/path", method: .get)
            for path in ["/console", "/console/sign-in", "/console/jobs", "/console/console.css"] {
                let response = try await client.execute(uri: path, method: .get)
                #expect(response.status == .notFound && response.text == unknown.text, "\(path)")
            }
            let post = try await client.execute(
                uri: "/console/sign-in", method: .post, headers: [.contentType: "application/x-www-form-urlencoded"],
                body: .init(string: "token=x"))
            #expect(post.status == .notFound && post.text == unknown.text)
        }
    }

    @Test func signingInSetsASignedExpiringHttpOnlyStrictCookie() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            let form = try await browser.get(client, "/console/sign-in")
            #expect(form.status == .ok)
            #expect(form.text.contains(#"<label for="token">Admin token</label>"#))
            let signedIn = try await browser.signIn(client)
            #expect(signedIn.status == .seeOther && signedIn.headers[.location] == "/console")
            let cookie = try #require(ConsoleBrowser.setCookies(signedIn).first { $0.hasPrefix("push_console_session=") })
            #expect(
                cookie.contains("; HttpOnly") && cookie.contains("; SameSite=Strict") && cookie.contains("; Path=/console"), "\(cookie)")
            #expect(cookie.contains("; Max-Age=43200"), "\(cookie)")
            #expect(!cookie.contains("Secure"), "plain HTTP: \(cookie)")
            let overview = try await browser.get(client, "/console")
            #expect(overview.status == .ok && overview.text.contains("<h1>Overview</h1>"))

            // Behind a TLS proxy the cookie is Secure.
            var tls = ConsoleBrowser()
            let secure = try await tls.signIn(client, headers: [.xForwardedProto: "https"])
            let secureCookie = try #require(ConsoleBrowser.setCookies(secure).first { $0.hasPrefix("push_console_session=") })
            #expect(secureCookie.contains("; Secure"), "\(secureCookie)")
        }
    }

    @Test func aWrongTokenIsRefusedWithAClearMessageAndNoSession() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            let refused = try await browser.signIn(client, token: "not-the-admin-token")
            #expect(refused.status == .unauthorized)
            #expect(refused.text.contains("That is not the admin token (PUSH_ADMIN_TOKEN)."))
            #expect(browser.cookies["push_console_session"] == nil)
            let page = try await browser.get(client, "/console")
            #expect(page.status == .seeOther && page.headers[.location] == "/console/sign-in")
        }
    }

    @Test func pagesWithoutASessionRedirectToTheFormAndPostsAreRefused() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            for path in ["/console", "/console/jobs", "/console/jobs/1", "/console/jobs/1/cancel"] {
                let response = try await client.execute(uri: path, method: .get)
                #expect(response.status == .seeOther && response.headers[.location] == "/console/sign-in", "\(path)")
            }
            // The admin API's bearer token is no session.
            let bearer = try await client.execute(
                uri: "/console", method: .get, headers: [.authorization: "Bearer \(ConsoleBrowser.adminToken)"])
            #expect(bearer.status == .seeOther)
            let post = try await client.execute(
                uri: "/console/jobs/1/cancel", method: .post,
                headers: [.contentType: "application/x-www-form-urlencoded"], body: .init(string: "csrf=x"))
            #expect(post.status == .unauthorized && post.text.contains("Sign in first"))
        }
    }

    @Test func forgedTamperedAndForeignCookiesAreRefused() async throws {
        let fixture = try await APIFixture.make()
        // A cookie signed under another admin token.
        let foreign = ConsoleSessions(adminToken: "another-admin-token-0123456789").start().cookieValue
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            let genuine = try #require(browser.cookies["push_console_session"])
            let parts = genuine.split(separator: ".").map(String.init)
            let later = "\(parts[0]).\(Int64(parts[1])! + 86400).\(parts[2])"
            let otherID = "0123456789abcdef0123456789abcdef.\(parts[1]).\(parts[2])"
            for value in [later, otherID, foreign, genuine + "x", "garbage", ""] {
                let response = try await client.execute(uri: "/console", method: .get, headers: [.cookie: "push_console_session=\(value)"])
                #expect(response.status == .seeOther, "\(value)")
            }
            let accepted = try await client.execute(uri: "/console", method: .get, headers: [.cookie: "push_console_session=\(genuine)"])
            #expect(accepted.status == .ok)
        }
    }

    @Test func anExpiredCookieIsRefused() {
        let sessions = ConsoleSessions(adminToken: ConsoleBrowser.adminToken)
        let start = Date(timeIntervalSince1970: 1_800_000_000)
        let (session, value) = sessions.start(now: start)
        #expect(sessions.session(cookieValue: value, now: start.addingTimeInterval(60)) == session)
        #expect(sessions.session(cookieValue: value, now: start.addingTimeInterval(12 * 3600 - 1)) == session)
        #expect(sessions.session(cookieValue: value, now: start.addingTimeInterval(12 * 3600)) == nil)
    }

    /// Signed out on one push-api, the cookie is refused by every replica and after a restart:
    /// the second push-api here, a process of its own on the same database, never saw it.
    @Test func signingOutEndsTheSessionEvenForACopyOfItsCookieOnEveryReplica() async throws {
        let fixture = try await APIFixture.make()
        let (copy, other) = try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            var other = ConsoleBrowser()
            _ = try await other.signIn(client)
            let copy = try #require(browser.cookies["push_console_session"])
            let csrf = try await browser.csrf(client)
            let out = try await browser.post(client, "/console/sign-out", [("csrf", csrf)])
            #expect(out.status == .seeOther && out.headers[.location] == "/console/sign-in")
            #expect(ConsoleBrowser.setCookies(out).contains { $0.hasPrefix("push_console_session=;") && $0.contains("Max-Age=0") })
            #expect(browser.cookies["push_console_session"] == nil)
            let replayed = try await client.execute(uri: "/console", method: .get, headers: [.cookie: "push_console_session=\(copy)"])
            #expect(replayed.status == .seeOther)
            return (copy, try #require(other.cookies["push_console_session"]))
        }
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            let replayed = try await client.execute(uri: "/console", method: .get, headers: [.cookie: "push_console_session=\(copy)"])
            #expect(replayed.status == .seeOther, "signed out on the other replica")
            let stillIn = try await client.execute(uri: "/console", method: .get, headers: [.cookie: "push_console_session=\(other)"])
            #expect(stillIn.status == .ok, "a session not signed out is still accepted")
        }
        #expect(try await fixture.database.text("SELECT count(*)::text FROM console_sign_outs") == "1")
    }

    @Test func postsWithoutTheSessionsCSRFTokenAreRefused() async throws {
        let fixture = try await APIFixture.make()
        let job = try await fixture.database.seed { try await $0.job() }
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            var other = ConsoleBrowser()
            _ = try await browser.signIn(client)
            _ = try await other.signIn(client)
            let othersToken = try await other.csrf(client)
            for fields in [[], [("csrf", "")], [("csrf", "forged")], [("csrf", othersToken)]] {
                let cancel = try await browser.post(client, "/console/jobs/\(job)/cancel", fields)
                #expect(cancel.status == .forbidden, "\(fields)")
                #expect(cancel.text.contains("security token is missing or does not belong to your session"))
                let out = try await browser.post(client, "/console/sign-out", fields)
                #expect(out.status == .forbidden)
            }
            #expect(try await fixture.database.text("SELECT status FROM push_jobs WHERE id = \(job)") == "queued")
            #expect(try await browser.get(client, "/console").status == .ok, "still signed in")
        }
    }

    @Test func theSignInFormMustComeFromTheConsole() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            // A cross-site form posting the right token, without the form's cookie and token.
            var browser = ConsoleBrowser()
            let forged = try await browser.post(client, "/console/sign-in", [("token", ConsoleBrowser.adminToken)])
            #expect(forged.status == .forbidden && forged.text.contains("This sign-in form has expired"))
            #expect(browser.cookies["push_console_session"] == nil)
        }
    }
}
