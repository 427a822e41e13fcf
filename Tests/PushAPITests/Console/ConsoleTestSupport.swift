import Foundation
import Hummingbird
import HummingbirdTesting
import NIOCore

/// A browser's share of a console conversation over HummingbirdTesting: the cookies it keeps,
/// the forms' hidden CSRF tokens it reads back from the pages, and form posts.
struct ConsoleBrowser: Sendable {
    static let adminToken = "console-admin-token-0123456789"
    var cookies: [String: String] = [:]

    /// The `value` of the page's first hidden csrf field.
    static func csrfToken(in html: String) -> String? {
        html.firstMatch(of: /name="csrf" value="([^"]*)"/).map { String($0.1) }
    }

    static func formBody(_ fields: [(String, String)]) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return fields.map { "\($0.0)=\($0.1.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")" }.joined(separator: "&")
    }

    /// Every Set-Cookie of a response, raw.
    static func setCookies(_ response: TestResponse) -> [String] {
        response.headers[values: .setCookie]
    }

    mutating func keep(_ response: TestResponse) {
        for line in Self.setCookies(response) {
            let pair = line.split(separator: ";")[0].split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let name = String(pair[0])
            let value = pair.count > 1 ? String(pair[1]) : ""
            let expired = line.contains("Max-Age=0")
            cookies[name] = expired || value.isEmpty ? nil : value
        }
    }

    var cookieHeader: HTTPFields {
        cookies.isEmpty ? [:] : [.cookie: cookies.map { "\($0.key)=\($0.value)" }.sorted().joined(separator: "; ")]
    }

    mutating func get(_ client: some TestClientProtocol, _ uri: String, headers: HTTPFields = [:]) async throws -> TestResponse {
        var all = cookieHeader
        all.append(contentsOf: headers)
        let response = try await client.execute(uri: uri, method: .get, headers: all, body: nil)
        keep(response)
        return response
    }

    mutating func post(
        _ client: some TestClientProtocol, _ uri: String, _ fields: [(String, String)],
        headers: HTTPFields = [:]
    ) async throws -> TestResponse {
        var all = cookieHeader
        all[.contentType] = "application/x-www-form-urlencoded"
        all.append(contentsOf: headers)
        let response = try await client.execute(uri: uri, method: .post, headers: all, body: ByteBuffer(string: Self.formBody(fields)))
        keep(response)
        return response
    }

    /// Fetches the sign-in form and posts `token` with the form's own CSRF token.
    mutating func signIn(
        _ client: some TestClientProtocol, token: String = adminToken,
        headers: HTTPFields = [:]
    ) async throws -> TestResponse {
        let form = try await get(client, "/console/sign-in", headers: headers)
        let csrf = Self.csrfToken(in: String(buffer: form.body)) ?? ""
        return try await post(client, "/console/sign-in", [("csrf", csrf), ("token", token)], headers: headers)
    }

    /// A signed-in page's CSRF token (the sign-out form's, which every page has).
    mutating func csrf(_ client: some TestClientProtocol) async throws -> String {
        let page = try await get(client, "/console/jobs")
        return Self.csrfToken(in: String(buffer: page.body)) ?? ""
    }
}
