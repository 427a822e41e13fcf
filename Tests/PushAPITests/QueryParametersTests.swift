import DeviceRegistry
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import TestSupport
import Testing

@testable import PushAPI

/// The one query-string reader of the admin API and the console: the same refusals, an empty
/// value refused or meaning any, and each surface answering a refusal in its own form.
@Suite("Query parameters")
struct QueryParametersTests {
    static func request(_ query: String) -> Request {
        Request(
            head: HTTPRequest(method: .get, scheme: "http", authority: "localhost", path: "/p?" + query),
            body: .init(buffer: ByteBuffer()))
    }

    static func problem(_ query: String, empty: QueryParameters.EmptyValue = .refused) -> QueryProblem? {
        do {
            _ = try QueryParameters(request(query), allowed: ["job", "status", "since"], empty: empty)
            return nil
        } catch {
            return error
        }
    }

    @Test func refusalsNameTheParameterWhicheverTheSurface() {
        for empty in [QueryParameters.EmptyValue.refused, .meansAny] {
            #expect(Self.problem("jobs=1", empty: empty)?.description == "unknown query parameter jobs; expected one of job, since, status")
            #expect(Self.problem("job=1&job=2", empty: empty) == .repeated("job"))
            #expect(Self.problem("status=sent%00", empty: empty)?.description == "status must not contain NUL characters")
        }
        #expect(Self.problem("job=")?.description == "job is empty; leave it out to not filter")
        #expect(Self.problem("job=&status=", empty: .meansAny) == nil)
        #expect(Self.problem("job=&job=", empty: .meansAny) == .repeated("job"), "given twice, even empty")
    }

    @Test func anEmptyValueMeansAnyOnlyWhenTheSurfaceSaysSo() throws {
        let query = try QueryParameters(Self.request("job=&status=sent"), allowed: ["job", "status"], empty: .meansAny)
        #expect(query.string("job") == nil && query.string("status") == "sent")
        #expect(try query.positiveInteger("job") == nil)
        #expect(try query.oneOf("status", DeliveryStatus.self) == .sent)
    }

    @Test func valuesAreReadWithTheirMessages() throws {
        let query = try QueryParameters(
            Self.request("job=0&status=lost&since=yesterday&limit=ten&kind=single"), allowed: ["job", "status", "since", "limit", "kind"])
        #expect(throws: QueryProblem.invalid("job", "job must be a positive integer")) { try query.positiveInteger("job") }
        #expect(throws: QueryProblem.invalid("status", "status must be one of pending, sent, failed, skipped")) {
            try query.oneOf("status", DeliveryStatus.self)
        }
        #expect(throws: QueryProblem.invalid("limit", "limit must be an integer in 1...200")) { try query.integer("limit", in: 1...200) }
        #expect(try query.oneOf("kind", JobKind.self) == .single, "an enum that is not a column's")
        let spelt = try QueryParameters(Self.request("job=%2B7&limit=050"), allowed: ["job", "limit"])
        #expect(throws: QueryProblem.invalid("job", "job must be a positive integer"), "+7") { try spelt.positiveInteger("job") }
        #expect(throws: QueryProblem.invalid("limit", "limit must be an integer in 1...200"), "050") {
            try spelt.integer("limit", in: 1...200)
        }
        do {
            _ = try query.time("since")
            Issue.record("yesterday is not a time")
        } catch {
            #expect(error.description.contains("since"))
        }
    }

    /// Through HTTP: the API's envelope and the console's page carry the same message.
    @Test func eachSurfaceAnswersARefusalInItsOwnForm() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test(adminToken: ConsoleBrowser.adminToken) { client in
            let api = try await client.execute(
                uri: "/admin/deliveries?status=sent%00", method: .get,
                headers: [.authorization: "Bearer \(ConsoleBrowser.adminToken)"], body: nil)
            #expect(api.status == .badRequest)
            let envelope = try JSONSerialization.jsonObject(with: Data(String(buffer: api.body).utf8)) as? [String: Any]
            #expect(envelope?["code"] as? String == "VALIDATION_FAILED")
            #expect(envelope?["message"] as? String == "status must not contain NUL characters")

            var browser = ConsoleBrowser()
            _ = try await browser.signIn(client)
            let page = try await browser.get(client, "/console/deliveries?status=sent%00")
            #expect(page.status == .badRequest && page.headers[.contentType]?.hasPrefix("text/html") == true)
            #expect(page.text.contains("status must not contain NUL characters"))
            let blank = try await browser.get(client, "/console/deliveries?job=&user=&app=&status=&since=")
            #expect(blank.status == .ok, "a form's blank choices mean any")
            let repeated = try await browser.get(client, "/console/jobs?app=&app=")
            #expect(repeated.status == .badRequest && repeated.text.contains("app is given twice"))
        }
    }
}
