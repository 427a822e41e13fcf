import Foundation
import Hummingbird
import HummingbirdTesting
import TestSupport
import Testing

@testable import PushAPI

@Suite("Console headers and error pages")
struct ConsolePageMiddlewareTests {
    @Test func everyConsoleAnswerForbidsScriptsFramingAndReferrers() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            var answers = [
                try await browser.get(client, "/console/sign-in"), try await browser.get(client, "/console/console.css"),
                try await browser.get(client, "/console"),
            ]
            _ = try await browser.signIn(client)
            answers += [
                try await browser.get(client, "/console"), try await browser.get(client, "/console/jobs/999"),
                try await browser.get(client, "/console/jobs?status=nope"), try await browser.post(client, "/console/sign-out", []),
            ]
            for answer in answers {
                let policy = try #require(answer.headers[.contentSecurityPolicy])
                #expect(policy.contains("default-src 'none'") && policy.contains("frame-ancestors 'none'"), "\(policy)")
                #expect(!policy.contains("script-src") && !policy.contains("unsafe-inline"), "no script is allowed at all: \(policy)")
                #expect(answer.headers[.xFrameOptions] == "DENY")
                #expect(answer.headers[.referrerPolicy] == "same-origin")
                #expect(answer.headers[.cacheControl] == "no-store")
            }
            #expect(answers[1].headers[.contentType] == "text/css; charset=utf-8")
        }
    }

    @Test func errorsArePagesNotTheAPIsJSON() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            let missing = try await browser.get(client, "/console/jobs/999")
            #expect(missing.status == .notFound && missing.headers[.contentType] == "text/html; charset=utf-8")
            #expect(missing.text.contains("There is no job #999."))
            let bad = try await browser.get(client, "/console/jobs?status=nope")
            #expect(bad.status == .badRequest && bad.text.contains("status must be one of queued, running, completed, failed, cancelled"))
            let unknown = try await browser.get(client, "/console/jobs?statuss=queued")
            #expect(unknown.status == .badRequest && unknown.text.contains("unknown query parameter statuss"))
        }
    }
}
