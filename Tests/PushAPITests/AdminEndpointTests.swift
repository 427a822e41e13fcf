import DeviceRegistry
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import PostgresNIO
import PushAPI
import ServiceSupport
import TestSupport
import Testing
import WireFormats

extension APIFixture {
    /// push-api with the admin endpoints on.
    func admin<T>(_ body: @Sendable (any TestClientProtocol) async throws -> T) async throws -> T {
        try await test(adminToken: AdminEndpointTests.token, body)
    }

    func scenario() async throws -> AuditScenario {
        try await database.withClient { try await AuditScenario.seed($0) }
    }

    /// Every job and delivery, to show a refused request changed nothing.
    func queueState() async throws -> String {
        try await database.text(
            """
            SELECT count(*) || ' jobs: ' || COALESCE(string_agg(id || ':' || status || ':' || validate_only, ',' ORDER BY id), '')
                   || ' / ' || (SELECT COALESCE(string_agg(id || ':' || status, ',' ORDER BY id), '') FROM push_deliveries)
              FROM push_jobs
            """)
    }
}

extension TestClientProtocol {
    func admin(_ method: HTTPRequest.Method, _ uri: String, json: String? = nil) async throws -> TestResponse {
        try await send(method, uri, token: AdminEndpointTests.token, json: json)
    }
}

func int64(_ value: Any?) -> Int64? { (value as? NSNumber)?.int64Value }

extension TestResponse {
    var code: String? { json["code"] as? String }
    var message: String { json["message"] as? String ?? "" }
    func ids(_ key: String) -> [Int64] { (json[key] as? [[String: Any]] ?? []).compactMap { int64($0["id"]) } }
    var deliveryIDs: [Int64] { ids("deliveries") }
    var jobID: Int64? { int64(json["jobId"]) }
    func number(_ key: String) -> Int? { int64(json[key]).map(Int.init) }
}

@Suite("Admin endpoints: queueing, jobs, cancelling, the delivery audit")
struct AdminEndpointTests {
    static let token = "admin-token-0123456789abcdef"
    static let queueBody = #"{"appCode":"wowa","userIds":[1],"message":{"notification":{"title":"Hi"}}}"#

    static func routes(job: Int64) -> [(HTTPRequest.Method, String)] {
        [
            (.post, "/push/notifications"), (.get, "/admin/jobs"), (.get, "/admin/jobs/\(job)"), (.delete, "/admin/jobs/\(job)"),
            (.post, "/admin/jobs/\(job)/cancel"), (.get, "/admin/deliveries"),
        ]
    }

    /// A fixture with one queued job holding one pending delivery: what a refused cancel must leave alone.
    func fixtureWithAPendingJob() async throws -> (APIFixture, Int64) {
        let fixture = try await APIFixture.make()
        let job = try await fixture.database.seed { seed in
            let job = try await seed.job()
            try await seed.delivery(job: job, device: try await seed.device(app: fixture.appID, user: 1, token: "pending-token"))
            return job
        }
        return (fixture, job)
    }

    // MARK: authentication

    @Test func withoutAnAdminTokenEveryRouteAnswersLikeAnUnknownPath() async throws {
        let (fixture, job) = try await fixtureWithAPendingJob()
        let before = try await fixture.queueState()
        try await fixture.test { client in
            let unknown = try await client.execute(uri: "/no/such/path", method: .get)
            #expect(unknown.status == .notFound && unknown.code == "NOT_FOUND" && unknown.json["status"] as? String == "NOT_FOUND")
            for (method, path) in Self.routes(job: job) {
                for bearer in [nil, Self.token, fixture.token()] {
                    let response = try await client.send(method, path, token: bearer, json: method == .post ? Self.queueBody : nil)
                    #expect(response.status == .notFound && response.text == unknown.text, "\(method) \(path) bearer \(bearer ?? "-")")
                }
            }
        }
        #expect(try await fixture.queueState() == before && before == "1 jobs: \(job):queued:false / 1:pending")
    }

    @Test func aMissingOrWrongAdminTokenIs401OnEveryRouteAndChangesNothing() async throws {
        let (fixture, job) = try await fixtureWithAPendingJob()
        let before = try await fixture.queueState()
        let lastCharDiffers = String(Self.token.dropLast()) + (Self.token.last == "f" ? "e" : "f")
        let refused: [HTTPFields] = [
            [:], [.authorization: "Bearer"], [.authorization: "Bearer wrong"], [.authorization: "Bearer \(lastCharDiffers)"],
            [.authorization: "Bearer \(Self.token)0"], [.authorization: "Bearer \(Self.token.dropLast())"],
            [.authorization: "Bearer \(Self.token.uppercased())"], [.authorization: "Bearer \(fixture.token())"],
            [.authorization: "Basic \(Self.token)"], [.authorization: Self.token], [.cookie: "accessToken=\(Self.token)"],
        ]
        try await fixture.admin { client in
            for (method, path) in Self.routes(job: job) {
                for var headers in refused {
                    if method == .post { headers[.contentType] = "application/json" }
                    let response = try await client.execute(
                        uri: path, method: method, headers: headers,
                        body: method == .post ? ByteBuffer(string: Self.queueBody) : nil)
                    #expect(response.status == .unauthorized && response.code == "UNAUTHENTICATED", "\(method) \(path) \(headers)")
                    #expect(response.headers[.wwwAuthenticate] == "Bearer" && response.message.contains("admin token"))
                    #expect(!response.text.contains(lastCharDiffers) && !response.text.contains(Self.token))
                }
            }
            // The right token, with the scheme in any case, is accepted.
            let accepted = try await client.execute(
                uri: "/admin/jobs/\(job)", method: .get, headers: [.authorization: "bearer \(Self.token)"])
            #expect(accepted.status == .ok)
        }
        #expect(try await fixture.queueState() == before)
    }

    @Test func theAdminTokenSettingIsAtLeast16Characters() throws {
        let base = ["DATABASE_URL": "postgres://u@h/d", "JWT_SECRET": TokenMint.secret]
        #expect(try APIConfiguration.fromEnvironment(base).adminToken == nil)
        #expect(try APIConfiguration.fromEnvironment(base.merging(["PUSH_ADMIN_TOKEN": ""]) { $1 }).adminToken == nil)
        #expect(
            try APIConfiguration.fromEnvironment(base.merging(["PUSH_ADMIN_TOKEN": "0123456789abcdef"]) { $1 }).adminToken
                == "0123456789abcdef")
        #expect(throws: ConfigurationError.invalid("PUSH_ADMIN_TOKEN", "must be at least 16 characters (e.g. openssl rand -hex 32)")) {
            try APIConfiguration.fromEnvironment(base.merging(["PUSH_ADMIN_TOKEN": "0123456789abcde"]) { $1 })
        }
    }

    // MARK: POST /push/notifications

    struct Accepted: Sendable, CustomTestStringConvertible {
        let fields: String
        /// What must hold of the stored row, in SQL.
        let stored: String
        var testDescription: String { fields }
    }

    static let message = #"""
        {"notification":{"title":"Hi ✓ \"there\"","body":"a/b\nc"},"data":{"order":"981","empty":""},
         "android":{"priority":"high","ttl":"3600s","direct_boot_ok":true,"notification":{"notification_count":3,"light_settings":{"color":{"red":0.25}}}},
         "apns":{"payload":{"aps":{"badge":1,"content-available":1,"sound":null}}},"webpush":{"headers":{"TTL":"60"}},"fcm_options":{"analytics_label":"x"}}
        """#

    static let accepted: [Accepted] = [
        Accepted(
            fields: #""userIds":[1,2]"#,
            stored:
                "user_ids = '{1,2}' AND platforms IS NULL AND NOT validate_only AND send_at BETWEEN now() - interval '1 minute' AND now() AND priority = 'high' AND expires_at IS NULL"
        ),
        Accepted(
            fields: #""campaign":true"#, stored: "user_ids IS NULL AND platforms IS NULL AND priority = 'bulk' AND expires_at IS NULL"),
        Accepted(fields: #""campaign":true,"platforms":["ios","web"]"#, stored: "user_ids IS NULL AND platforms = '{ios,web}'"),
        Accepted(fields: #""userIds":[7],"sendAt":"2030-12-01T10:00:00.250+01:00""#, stored: "send_at = '2030-12-01T09:00:00.25Z'"),
        Accepted(
            fields: #""userIds":[7],"sendAt":"2030-12-01T09:00:00Z","dryRun":true"#,
            stored: "validate_only AND send_at = '2030-12-01T09:00:00Z'"),
        Accepted(
            fields: #""campaign":true,"dryRun":false,"idempotencyKey":"k-1""#, stored: "NOT validate_only AND idempotency_key = 'k-1'"),
        // Scheduling priority and expiry (issue 24): any priority for either audience, null the same as left out.
        Accepted(fields: #""userIds":[1],"priority":"high""#, stored: "priority = 'high'"),
        Accepted(fields: #""userIds":[1],"priority":"normal""#, stored: "priority = 'normal'"),
        Accepted(fields: #""userIds":[1],"priority":"bulk""#, stored: "priority = 'bulk'"),
        Accepted(fields: #""campaign":true,"priority":"high""#, stored: "priority = 'high'"),
        Accepted(fields: #""campaign":true,"priority":"normal""#, stored: "priority = 'normal'"),
        Accepted(
            fields: #""campaign":true,"priority":null,"expiresAt":null,"ttlSeconds":null"#,
            stored: "priority = 'bulk' AND expires_at IS NULL"),
        Accepted(
            fields: #""userIds":[1],"sendAt":"2030-12-01T09:00:00Z","expiresAt":"2030-12-01T10:30:00.500+01:00""#,
            stored: "expires_at = '2030-12-01T09:30:00.5Z'"),
        Accepted(fields: #""userIds":[1],"sendAt":"2030-12-01T09:00:00Z","ttlSeconds":900"#, stored: "expires_at = '2030-12-01T09:15:00Z'"),
        Accepted(
            fields: #""campaign":true,"ttlSeconds":3600,"expiresAt":null"#,
            stored: "expires_at = send_at + interval '1 hour' AND send_at BETWEEN now() - interval '1 minute' AND now()"),
    ]

    @Test(arguments: accepted)
    func queueingStoresTheJobAndTheMessageExactly(_ request: Accepted) async throws {
        let fixture = try await APIFixture.make()
        let id = try await fixture.admin { client in
            let response = try await client.admin(
                .post, "/push/notifications", json: #"{"appCode":"wowa",\#(request.fields),"message":\#(Self.message)}"#)
            #expect(response.status == .accepted, "\(response.text)")
            return try #require(response.jobID)
        }
        #expect(
            try await fixture.database.text(
                """
                SELECT (status = 'queued' AND message = \(Self.message)::jsonb AND \(unescaped: request.stored))::text FROM push_jobs WHERE id = \(id)
                """) == "true")
        #expect(try await fixture.database.text("SELECT count(*)::text FROM push_jobs") == "1")
    }

    /// Numbers are passed through digit for digit (jsonb keeps them exactly; a Double would not).
    @Test func bigAndPreciseNumbersInTheMessageAreStoredExactly() async throws {
        let fixture = try await APIFixture.make()
        let message = #"{"apns":{"payload":{"aps":{"badge":1},"order":12345678901234567890,"ratio":0.12345678901234567891}}}"#
        let id = try await fixture.admin { client in
            try #require(
                try await client.admin(.post, "/push/notifications", json: #"{"appCode":"wowa","userIds":[1],"message":\#(message)}"#).jobID
            )
        }
        #expect(try await fixture.database.text("SELECT (message = \(message)::jsonb)::text FROM push_jobs WHERE id = \(id)") == "true")
    }

    /// PostgreSQL text cannot hold NUL: a 400 naming the field, never a 500 nor the database's words.
    @Test func nulCharactersAreRefusedNamingTheField() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.admin { client in
            for (body, names) in [
                (#"{"appCode":"wo\u0000wa","userIds":[1],"message":{}}"#, "appCode must not contain NUL characters"),
                (#"{"appCode":"wowa","userIds":[1],"idempotencyKey":"k\u0000","message":{}}"#, "idempotencyKey must not contain NUL"),
                (
                    #"{"appCode":"wowa","userIds":[1],"message":{"notification":{"title":"a\u0000b"}}}"#,
                    "message.notification.title must not contain NUL characters (\\u0000)"
                ),
                (#"{"appCode":"wowa","userIds":[1],"message":{"data":{"k\u0000":"v"}}}"#, "message.data must not contain NUL"),
                (
                    #"{"appCode":"wowa","campaign":true,"platforms":["io\u0000s"],"message":{}}"#,
                    "platforms.0 must not contain NUL characters (\\u0000)"
                ),
                (#"{"appCode":"wowa","userIds":[1],"sendAt":"2030-01-01T00:00:00Z\u0000","message":{}}"#, "sendAt must not contain NUL"),
            ] {
                let response = try await client.admin(.post, "/push/notifications", json: body)
                #expect(response.status == .badRequest && response.code == "VALIDATION_FAILED", "\(body): \(response.text)")
                #expect(response.message.contains(names), "\(body): \(response.text)")
            }
        }
        #expect(try await fixture.queueState() == "0 jobs:  / ")
    }

    /// SQL takes any time PostgreSQL holds (`push_enqueue(send_at => '0044-03-15 BC')`): the
    /// job is shown with a signed six-digit year, as JavaScript writes one. Formatting year 0
    /// once stopped push-api on every listing that held the job.
    @Test func aJobQueuedFromSQLForAYearBeyondFourDigitsIsShown() async throws {
        let fixture = try await APIFixture.make()
        let (early, late) = try await fixture.database.seed { seed in
            (
                try #require(
                    try await seed.value("SELECT push_enqueue('wowa', '{1}', '{}', send_at => '0044-03-15 12:00:00+00 BC')", as: Int64.self)
                ),
                try #require(
                    try await seed.value("SELECT push_enqueue('wowa', '{1}', '{}', send_at => '12345-06-07 08:09:10+00')", as: Int64.self))
            )
        }
        try await fixture.admin { client in
            let shown = try await client.admin(.get, "/admin/jobs/\(early)")
            #expect(shown.status == .ok && shown.json["sendAt"] as? String == "-000043-03-15T12:00:00.000Z", "\(shown.text)")
            let list = try await client.admin(.get, "/admin/jobs")
            let jobs = try #require(list.json["jobs"] as? [[String: Any]], "\(list.text)")
            #expect(jobs.compactMap { $0["sendAt"] as? String } == ["+012345-06-07T08:09:10.000Z", "-000043-03-15T12:00:00.000Z"])
            #expect(jobs.compactMap { int64($0["id"]) } == [late, early])
        }
    }

    @Test func theSameIdempotencyKeyGivesTheSameJobNeverASecond() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.admin { client in
            let body = #"{"appCode":"wowa","userIds":[1],"idempotencyKey":"order-981-shipped","message":{"notification":{"title":"1"}}}"#
            let first = try await client.admin(.post, "/push/notifications", json: body)
            let second = try await client.admin(.post, "/push/notifications", json: body)
            let other = try await client.admin(
                .post, "/push/notifications", json: body.replacingOccurrences(of: #""userIds":[1]"#, with: #""campaign":true"#))
            #expect(first.status == .accepted && second.status == .accepted && other.status == .accepted)
            #expect(first.jobID != nil && second.jobID == first.jobID && other.jobID == first.jobID)
            // A replay says so, as Stripe's API does; a new job does not.
            let replayed = HTTPField.Name("Idempotent-Replayed")!
            #expect(first.headers[replayed] == nil && second.headers[replayed] == "true" && other.headers[replayed] == "true")
            let fresh = try await client.admin(
                .post, "/push/notifications", json: body.replacingOccurrences(of: "order-981", with: "order-982"))
            #expect(fresh.status == .accepted && fresh.jobID != first.jobID && fresh.headers[replayed] == nil)
        }
        #expect(
            try await fixture.database.text(
                "SELECT string_agg(COALESCE(array_to_string(user_ids, ','), 'campaign'), ' ' ORDER BY id) FROM push_jobs") == "1 1")
    }

    @Test func theDocumentedMaximumOf10000UserIdsIsAccepted() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.admin { client in
            let ids = (1...10_000).map(String.init).joined(separator: ",")
            let response = try await client.admin(
                .post, "/push/notifications",
                json: #"{"appCode":"wowa","userIds":[\#(ids)],"message":{"notification":{"title":"Hi"}}}"#)
            #expect(response.status == .accepted, "openapi.yaml allows maxItems 10000; got \(response.status.code) \(response.text)")
            let tooMany = try await client.admin(
                .post, "/push/notifications",
                json: #"{"appCode":"wowa","userIds":[\#(ids),10001],"message":{"notification":{"title":"Hi"}}}"#)
            #expect(tooMany.status == .badRequest && tooMany.message.contains("userIds"), "\(tooMany.text)")
        }
    }

    struct Rejected: Sendable, CustomTestStringConvertible {
        let body: String
        var contentType = "application/json"
        var status = 400
        var code = "VALIDATION_FAILED"
        /// The refusal names this.
        let names: String
        var testDescription: String { "\(status) \(names): \(body.prefix(70))" }
    }

    static func notification(_ fields: String, message: String = #"{"notification":{"title":"Hi"}}"#) -> String {
        #"{"appCode":"wowa",\#(fields),"message":\#(message)}"#
    }

    static let rejected: [Rejected] = [
        Rejected(body: notification(#""userIds":[1]"#, message: #"{"data":{"k":1}}"#), names: "message.data.k must be a string"),
        Rejected(body: notification(#""userIds":[1]"#, message: #"{"data":{"from":"x"}}"#), names: "message.data.from is a reserved key"),
        Rejected(
            body: notification(#""userIds":[1]"#, message: #"{"token":"abc","notification":{"title":"Hi"}}"#),
            names: "message must not carry a target (token)"),
        Rejected(body: notification(#""campaign":true"#, message: #"{"topic":"news"}"#), names: "message must not carry a target (topic)"),
        Rejected(
            body: notification(#""userIds":[1]"#, message: #"{"priority":"high"}"#), names: "message has an unknown field \"priority\""),
        Rejected(
            body: notification(#""userIds":[1]"#, message: #"{"data":{"k":"\#(String(repeating: "x", count: 5000))"}}"#),
            names: "FCM allows 4096"),
        Rejected(body: notification(#""userIds":[1]"#, message: #""hello""#), names: "message must be a JSON object"),
        Rejected(body: notification(#""userIds":[1]"#, message: "[1]"), names: "message must be a JSON object"),
        Rejected(body: #"{"appCode":"nope","userIds":[1],"message":{"notification":{"title":"Hi"}}}"#, names: "appCode"),
        Rejected(body: #"{"appCode":"","userIds":[1],"message":{"notification":{"title":"Hi"}}}"#, names: "appCode"),
        Rejected(body: #"{"userIds":[1],"message":{"notification":{"title":"Hi"}}}"#, names: "appCode is required"),
        Rejected(body: #"{"appCode":"wowa","userIds":[1]}"#, names: "message is required"),
        Rejected(body: notification(#""userIds":[1],"sendAt":"tomorrow""#), names: "sendAt"),
        Rejected(body: notification(#""userIds":[1],"sendAt":"2026-12-01 09:00""#), names: "sendAt"),
        Rejected(body: notification(#""userIds":[1],"sendAt":"2026-12-01T09:00:00""#), names: "sendAt"),
        Rejected(body: notification(#""userIds":[1],"sendAt":1796115600"#), names: "sendAt"),
        // What Foundation's parser let through: trailing text, a day rolled into March, year 0.
        Rejected(body: notification(#""userIds":[1],"sendAt":"2030-01-01T00:00:00Zgarbage""#), names: "sendAt"),
        Rejected(body: notification(#""userIds":[1],"sendAt":"2030-02-30T00:00:00Z""#), names: "sendAt"),
        Rejected(body: notification(#""userIds":[1],"sendAt":"0000-01-01T00:00:00Z""#), names: "sendAt"),
        Rejected(body: notification(#""userIds":[1],"campaign":true"#), names: "userIds"),
        Rejected(body: notification(#""dryRun":true"#), names: "userIds"),
        Rejected(body: notification(#""campaign":false"#), names: "userIds"),
        Rejected(body: notification(#""userIds":[]"#), names: "userIds"),
        Rejected(body: notification(#""userIds":[1,0]"#), names: "userIds.1"),
        Rejected(body: notification(#""userIds":[-4]"#), names: "userIds.0"),
        Rejected(body: notification(#""userIds":["1"]"#), names: "userIds.0"),
        Rejected(body: notification(#""userIds":1"#), names: "userIds"),
        Rejected(body: notification(#""campaign":true,"platforms":["ios","windows"]"#), names: "platforms.1"),
        Rejected(body: notification(#""campaign":true,"platforms":[]"#), names: "platforms"),
        Rejected(body: notification(#""userIds":[1],"platforms":["ios"]"#), names: "platforms"),
        Rejected(body: notification(#""campaign":"yes""#), names: "campaign"),
        Rejected(body: notification(#""userIds":[1],"dryRun":"true""#), names: "dryRun"),
        Rejected(body: notification(#""userIds":[1],"idempotencyKey":"""#), names: "idempotencyKey"),
        Rejected(body: notification(#""userIds":[1],"idempotencyKey":"\#(String(repeating: "k", count: 201))""#), names: "idempotencyKey"),
        Rejected(body: notification(#""userIDs":[1]"#), names: "userIDs"),
        Rejected(body: notification(#""userIds":[1],"send_at":"2030-01-01T00:00:00Z""#), names: "send_at"),
        Rejected(
            body: notification(#""userIds":[1],"priority":"urgent""#), names: #"priority must be one of high, normal, bulk, not "urgent""#),
        Rejected(
            body: notification(#""campaign":true,"priority":"HIGH""#), names: #"priority must be one of high, normal, bulk, not "HIGH""#),
        Rejected(body: notification(#""campaign":true,"priority":"""#), names: "priority must be one of high, normal, bulk"),
        Rejected(body: notification(#""userIds":[1],"priority":1"#), names: "priority"),
        Rejected(body: notification(#""userIds":[1],"expiresAt":"2020-01-01T00:00:00Z""#), names: "expiresAt: expires_at"),
        Rejected(
            body: notification(#""userIds":[1],"sendAt":"2030-01-01T10:00:00Z","expiresAt":"2030-01-01T09:00:00Z""#),
            names: "expiresAt: expires_at"),
        Rejected(
            body: notification(#""userIds":[1],"sendAt":"2030-01-01T10:00:00Z","expiresAt":"2030-01-01T10:00:00Z""#),
            names: "is not after send_at"),
        Rejected(body: notification(#""userIds":[1],"sendAt":"2020-01-01T10:00:00Z","ttlSeconds":60"#), names: "ttlSeconds: expires_at"),
        Rejected(
            body: notification(#""userIds":[1],"expiresAt":"2030-01-01T00:00:00Z","ttlSeconds":60"#),
            names: "give expiresAt or ttlSeconds, not both"),
        Rejected(body: notification(#""userIds":[1],"expiresAt":"tomorrow""#), names: "expiresAt 'tomorrow' is not an ISO 8601 time"),
        Rejected(body: notification(#""userIds":[1],"expiresAt":"2030-01-01T00:00:00""#), names: "expiresAt"),
        Rejected(body: notification(#""campaign":true,"ttlSeconds":0"#), names: "ttlSeconds must be a positive integer"),
        Rejected(body: notification(#""campaign":true,"ttlSeconds":-60"#), names: "ttlSeconds must be a positive integer"),
        Rejected(body: notification(#""campaign":true,"ttlSeconds":1.5"#), names: "ttlSeconds"),
        Rejected(body: notification(#""campaign":true,"ttlSeconds":"60""#), names: "ttlSeconds"),
        Rejected(body: notification(#""campaign":true,"ttlSeconds":9223372036854775807"#), names: "ttlSeconds"),
        Rejected(body: notification(#""campaign":true,"ttlSeconds":99999999999999999999"#), names: "ttlSeconds"),
        Rejected(body: notification(#""campaign":true,"ttlSeconds":315360001"#), names: "ttlSeconds must be at most 315360000"),
        // 200 characters as Swift counts them, 400 code points as PostgreSQL does.
        Rejected(
            body: notification(#""userIds":[1],"idempotencyKey":"\#(String(repeating: "e\u{301}", count: 200))""#),
            names: "idempotencyKey must be 1 to 200 characters"),
        Rejected(
            body: notification(#""campaign":true,"ttl":60"#), names: #"unknown field "ttl"; expected one of appCode, userIds, campaign"#),
        Rejected(body: "[1]", names: "the body must be a JSON object"),
        Rejected(body: #"{"appCode":"wowa","userIds":[1],"message":{"#, code: "MALFORMED_JSON", names: "not valid JSON"),
        Rejected(
            body: #"{"appCode":"wowa","userIds":[1],"message":{"data":{"k":"\ud800"}}}"#, code: "MALFORMED_JSON",
            names: "not valid JSON: invalid UTF-8 or a lone surrogate in the string at line 1"),
        Rejected(body: queueBody, contentType: "text/plain", status: 415, code: "UNSUPPORTED_MEDIA_TYPE", names: "application/json"),
        // Over the device routes' 16 KiB yet within this route's 256 KiB: FCM's own limit answers.
        Rejected(
            body: notification(#""userIds":[1]"#, message: #"{"data":{"k":"\#(String(repeating: "x", count: 17_000))"}}"#),
            names: "FCM allows 4096"),
        Rejected(
            body: notification(#""userIds":[1]"#, message: #"{"data":{"k":"\#(String(repeating: "x", count: 270_000))"}}"#),
            status: 413, code: "PAYLOAD_TOO_LARGE", names: "262144 bytes"),
    ]

    @Test(arguments: rejected)
    func badInputIsRefusedNamingTheFieldAndQueuesNothing(_ bad: Rejected) async throws {
        let fixture = try await APIFixture.make()
        try await fixture.admin { client in
            let response = try await client.send(
                .post, "/push/notifications", token: Self.token, json: bad.body, contentType: bad.contentType)
            #expect(Int(response.status.code) == bad.status && response.code == bad.code, "\(response.text)")
            #expect(response.message.contains(bad.names), "\(response.text)")
            #expect((response.json["status"] as? String)?.isEmpty == false)
        }
        #expect(try await fixture.queueState() == "0 jobs:  / ")
    }

    // MARK: jobs

    @Test func aJobsCountsAreItsDeliveryRowsWithTheFirstError() async throws {
        let fixture = try await APIFixture.make()
        let scenario = try await fixture.scenario()
        // Two failures: the earlier-changed one is the first error, whatever the insertion order.
        let failing = try await fixture.database.seed { seed in
            let job = try await seed.job(users: [1, 2])
            try await seed.delivery(job: job, device: scenario.devices[0], status: .failed, errorCode: "INTERNAL", errorMessage: "later")
            let earlier = try await seed.delivery(
                job: job, device: scenario.devices[1], status: .failed, errorCode: "INVALID_ARGUMENT", errorMessage: "earlier")
            try await seed.run("UPDATE push_deliveries SET updated_at = now() - interval '1 hour' WHERE id = \(earlier)")
            try await seed.expanded(job)
            return job
        }
        try await fixture.admin { client in
            let expected: [(Int64, [String: Int], String?)] = [
                (
                    scenario.jobs[0], ["audience": 2, "sent": 1, "failed": 1, "skipped": 0, "pending": 0],
                    "UNREGISTERED: \(AuditScenario.failure.message)"
                ),
                (scenario.jobs[1], ["audience": 1, "sent": 0, "failed": 0, "skipped": 1, "pending": 0], nil),
                (scenario.jobs[2], ["audience": 2, "sent": 1, "failed": 0, "skipped": 0, "pending": 1], nil),
                (failing, ["audience": 2, "sent": 0, "failed": 2, "skipped": 0, "pending": 0], "INVALID_ARGUMENT: earlier"),
            ]
            for (id, counts, firstError) in expected {
                let job = try await client.admin(.get, "/admin/jobs/\(id)")
                #expect(job.status == .ok && job.number("id") == Int(id) && job.json["status"] as? String == "queued")
                #expect(counts.allSatisfy { job.number($0.key) == $0.value }, "job \(id): \(job.text)")
                #expect(job.json["firstError"] as? String == firstError, "job \(id): \(job.text)")
                #expect(job.json["dryRun"] as? Bool == false && job.json["finishedAt"] == nil)
                #expect((job.json["sendAt"] as? String).flatMap(ISO8601Time.parse) != nil)
            }
            #expect(try await client.admin(.get, "/admin/jobs/\(scenario.jobs[1])").json["appCode"] as? String == "beta")
            // The job's own error comes first.
            try await fixture.database.seed {
                try await $0.run(
                    "UPDATE push_jobs SET status = 'failed', finished_at = now(), last_error = 'app wowa has no credentials' WHERE id = \(failing)"
                )
            }
            let failed = try await client.admin(.get, "/admin/jobs/\(failing)")
            #expect(failed.json["firstError"] as? String == "app wowa has no credentials" && failed.json["finishedAt"] is String)

            let missing = try await client.admin(.get, "/admin/jobs/999999")
            #expect(missing.status == .notFound && missing.code == "NOT_FOUND" && missing.message.contains("999999"))
            for bad in ["abc", "0", "-1", "1.5", "99999999999999999999"] {
                let response = try await client.admin(.get, "/admin/jobs/\(bad)")
                #expect(response.status == .badRequest && response.message == "job id must be a positive integer", "\(bad)")
            }
        }
    }

    /// A job's priority and expiry, and how many of its deliveries expired (skipped EXPIRED by
    /// `push_expire_jobs`, which workers run every second; no worker here).
    @Test func jobsShowPriorityExpiryAndExpiredCounts() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.database.seed { seed in
            for user: Int64 in 1...3 { _ = try await seed.device(app: fixture.appID, user: user, token: "expiry-token-\(user)") }
        }
        try await fixture.admin { client in
            func queue(_ fields: String) async throws -> Int64 {
                let response = try await client.admin(.post, "/push/notifications", json: Self.notification(fields))
                #expect(response.status == .accepted, "\(response.text)")
                return try #require(response.jobID)
            }
            let expiring = try await queue(#""userIds":[1,2],"priority":"normal","ttlSeconds":1"#)
            let campaign = try await queue(#""campaign":true,"expiresAt":"2030-12-01T09:00:00Z""#)
            let plain = try await queue(#""userIds":[3]"#)
            let before = try await client.admin(.get, "/admin/jobs/\(expiring)")
            #expect(
                before.json["priority"] as? String == "normal" && before.number("expired") == 0 && before.number("pending") == 2,
                "\(before.text)")
            let sendAt = try #require((before.json["sendAt"] as? String).flatMap(ISO8601Time.parse))
            let expiresAt = try #require((before.json["expiresAt"] as? String).flatMap(ISO8601Time.parse), "\(before.text)")
            #expect(abs(expiresAt.timeIntervalSince(sendAt) - 1) < 0.002)

            try await Task.sleep(for: .milliseconds(1100))
            try await fixture.database.seed { try await $0.run("SELECT push_expire_jobs()") }

            let after = try await client.admin(.get, "/admin/jobs/\(expiring)")
            #expect(after.json["status"] as? String == "completed" && after.json["priority"] as? String == "normal", "\(after.text)")
            #expect(
                after.number("audience") == 2 && after.number("skipped") == 2 && after.number("expired") == 2
                    && after.number("pending") == 0)
            #expect(after.json["expiresAt"] as? String == before.json["expiresAt"] as? String && after.json["finishedAt"] is String)

            let list = try await client.admin(.get, "/admin/jobs")
            let jobs = try #require(list.json["jobs"] as? [[String: Any]], "\(list.text)")
            #expect(jobs.compactMap { int64($0["id"]) } == [plain, campaign, expiring])
            #expect(jobs.compactMap { $0["priority"] as? String } == ["high", "bulk", "normal"])
            #expect(jobs.map { $0["expiresAt"] as? String } == [nil, "2030-12-01T09:00:00.000Z", after.json["expiresAt"] as? String])
            #expect(jobs.compactMap { int64($0["expired"]) } == [0, 0, 2] && jobs[0].keys.contains("expiresAt") == false)
        }
        #expect(
            try await fixture.database.text("SELECT string_agg(status || ':' || error_code, ',') FROM push_deliveries")
                == "skipped:EXPIRED,skipped:EXPIRED")
    }

    @Test func jobsListNewestFirstByStatus() async throws {
        let fixture = try await APIFixture.make()
        let scenario = try await fixture.scenario()
        try await fixture.database.seed {
            try await $0.run("UPDATE push_jobs SET status = 'completed', finished_at = now() WHERE id = \(scenario.jobs[1])")
        }
        try await fixture.admin { client in
            func ids(_ query: String) async throws -> [Int64] {
                let response = try await client.admin(.get, "/admin/jobs\(query)")
                #expect(response.status == .ok, "\(query): \(response.text)")
                return response.ids("jobs")
            }
            #expect(try await ids("") == scenario.jobs.reversed())
            #expect(try await ids("?status=queued") == [scenario.jobs[2], scenario.jobs[0]])
            #expect(try await ids("?status=completed&limit=5") == [scenario.jobs[1]])
            #expect(try await ids("?limit=1") == [scenario.jobs[2]])
            for (query, names) in [("status=done", "status"), ("limit=0", "limit"), ("limit=1001", "limit"), ("statuz=queued", "statuz")] {
                let response = try await client.admin(.get, "/admin/jobs?\(query)")
                #expect(response.status == .badRequest && response.message.contains(names), "\(query): \(response.text)")
            }
        }
    }

    /// A job cancelled before its send time never had its audience counted: null (not 0) in the
    /// cancel's answer, the job and the listing. A job whose audience was expanded keeps its count.
    @Test func aJobCancelledBeforeItRanHasNoAudienceCount() async throws {
        let fixture = try await APIFixture.make()
        let scenario = try await fixture.scenario()
        try await fixture.database.seed {
            try await $0.run("UPDATE push_jobs SET status = 'completed', finished_at = now() WHERE id = \(scenario.jobs[0])")
        }
        try await fixture.admin { client in
            let tomorrow = WireJSON.formatted(Date().addingTimeInterval(86_400))
            let queued = try await client.admin(
                .post, "/push/notifications", json: Self.notification(#""userIds":[1,2],"sendAt":"\#(tomorrow)""#))
            let scheduled = try #require(queued.jobID, "\(queued.text)")
            // While it waits, its audience is the devices it would reach now.
            #expect(try await client.admin(.get, "/admin/jobs/\(scheduled)").number("audience") == 2)
            let cancelled = try await client.admin(.delete, "/admin/jobs/\(scheduled)")
            let job = try await client.admin(.get, "/admin/jobs/\(scheduled)")
            let listed = try #require((try await client.admin(.get, "/admin/jobs").json["jobs"] as? [[String: Any]])?.first)
            for shown in [cancelled.json, job.json, listed] {
                #expect(int64(shown["id"]) == scheduled && shown["status"] as? String == "cancelled", "\(shown)")
                #expect(shown["audience"] is NSNull && int64(shown["sent"]) == 0 && int64(shown["pending"]) == 0, "\(shown)")
            }
            let ran = try await client.admin(.get, "/admin/jobs/\(scenario.jobs[0])")
            #expect(ran.json["status"] as? String == "completed" && ran.number("audience") == 2 && ran.number("sent") == 1, "\(ran.text)")
            // Who it was for and what it said, as pushctl jobs shows them.
            #expect(ran.json["kind"] as? String == "single" && ran.json["title"] as? String == "t", "\(ran.text)")
            #expect(listed["kind"] as? String == "single" && listed["title"] as? String == "Hi", "\(listed)")
            let campaign = try await client.admin(.get, "/admin/jobs/\(scenario.jobs[2])")
            #expect(campaign.json["kind"] as? String == "campaign", "\(campaign.text)")
        }
    }

    @Test func cancelSkipsWhatIsPendingKeepsWhatWasSentAndHappensOnce() async throws {
        let fixture = try await APIFixture.make()
        let scenario = try await fixture.scenario()
        // Job 2 (a campaign) has one pending and one sent delivery; add one a worker is sending right now.
        let (inFlight, running) = try await fixture.database.seed { seed in
            let device = try await seed.device(app: fixture.appID, user: 3, token: "in-flight-token")
            let inFlight = try await seed.delivery(job: scenario.jobs[2], device: device)
            try await seed.run(
                "UPDATE push_deliveries SET lease_owner = 'worker-1', next_attempt_at = now() + interval '30 seconds' WHERE id = \(inFlight)"
            )
            let running = try await seed.job(users: [3])
            try await seed.run("UPDATE push_jobs SET status = 'running' WHERE id = \(running)")
            try await seed.run("UPDATE push_jobs SET status = 'completed', finished_at = now() WHERE id = \(scenario.jobs[1])")
            return (inFlight, running)
        }
        try await fixture.admin { client in
            let cancelled = try await client.admin(.delete, "/admin/jobs/\(scenario.jobs[2])")
            #expect(cancelled.status == .ok && cancelled.json["status"] as? String == "cancelled", "\(cancelled.text)")
            #expect(cancelled.number("sent") == 1 && cancelled.number("skipped") == 1 && cancelled.number("pending") == 1)
            #expect(cancelled.json["finishedAt"] is String)
            for (method, path) in [
                (HTTPRequest.Method.delete, "/admin/jobs/\(scenario.jobs[2])"), (.post, "/admin/jobs/\(scenario.jobs[2])/cancel"),
            ] {
                let again = try await client.admin(method, path)
                #expect(
                    again.status == .conflict && again.code == "JOB_FINISHED" && again.message.contains("already cancelled"),
                    "\(again.text)")
            }
            let byPost = try await client.admin(.post, "/admin/jobs/\(scenario.jobs[0])/cancel")
            #expect(byPost.status == .ok && byPost.json["status"] as? String == "cancelled" && byPost.number("failed") == 1)
            let whileRunning = try await client.admin(.post, "/admin/jobs/\(running)/cancel")
            #expect(whileRunning.status == .ok && whileRunning.json["status"] as? String == "cancelled")
            let completed = try await client.admin(.delete, "/admin/jobs/\(scenario.jobs[1])")
            #expect(completed.status == .conflict && completed.code == "JOB_FINISHED" && completed.message.contains("already completed"))
            for (method, suffix) in [(HTTPRequest.Method.delete, ""), (.post, "/cancel")] {
                #expect(try await client.admin(method, "/admin/jobs/999999\(suffix)").status == .notFound)
                #expect(try await client.admin(method, "/admin/jobs/abc\(suffix)").status == .badRequest)
            }
        }
        let ids = scenario.deliveries
        #expect(
            try await fixture.database.text(
                """
                SELECT string_agg(id || ':' || status || ':' || COALESCE(error_code, '-'), ' ' ORDER BY id) FROM push_deliveries
                """)
                == "\(ids[0]):sent:- \(ids[1]):failed:UNREGISTERED \(ids[2]):skipped:- \(ids[3]):skipped:CANCELLED \(ids[4]):sent:- \(inFlight):pending:-"
        )
        #expect(
            try await fixture.database.text("SELECT string_agg(status, ',' ORDER BY id) FROM push_jobs")
                == "cancelled,completed,cancelled,cancelled")
    }

    // MARK: GET /admin/deliveries

    @Test func deliveriesFilterNewestFirstWithTokensMasked() async throws {
        let fixture = try await APIFixture.make()
        let scenario = try await fixture.scenario()
        try await fixture.admin { client in
            for query in AuditScenario.queries {
                let page = try await client.admin(.get, "/admin/deliveries?\(query.queryString(scenario))")
                #expect(page.status == .ok && page.deliveryIDs == query.expectedIDs(scenario), "\(query): \(page.text)")
                #expect(page.json["nextCursor"] is NSNull, "\(query)")
            }
            let all = try await client.admin(.get, "/admin/deliveries")
            let records = all.json["deliveries"] as? [[String: Any]] ?? []
            #expect(records.compactMap { $0["token"] as? String } == [1, 0, 2, 1, 0].map(AuditScenario.masked))
            #expect(!all.text.contains("secret") && AuditScenario.tokens.allSatisfy { !all.text.contains($0) })
            let failed = try #require(records.first { $0["status"] as? String == "failed" })
            #expect(failed["errorCode"] as? String == "UNREGISTERED" && failed["errorMessage"] as? String == AuditScenario.failure.message)
            #expect(int64(failed["userId"]) == 2 && failed["appCode"] as? String == "wowa" && failed["platform"] as? String == "android")
            #expect(int64(failed["jobId"]) == scenario.jobs[0] && int64(failed["deviceId"]) == scenario.devices[1])
            #expect(int64(failed["attempts"]) == 2 && failed["updatedAt"] as? String == "2020-06-01T00:00:00.000Z")
        }
    }

    @Test func deliveriesRefuseBadParametersNamingThem() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.admin { client in
            let cases = [
                ("limit=0", "limit"), ("limit=1001", "limit"), ("limit=ten", "limit"), ("job_id=1", "job_id"), ("jobId=abc", "jobId"),
                ("jobId=1&jobId=2", "jobId"), ("userId=0", "userId"), ("cursor=abc", "cursor"), ("cursor=0", "cursor"),
                ("cursor=-5", "cursor"), ("status=delivered", "status"), ("since=yesterday", "since"),
                ("since=2026-12-01T09:00:00", "since"), ("jobId=", "jobId"), ("appCode=", "appCode"),
                ("appCode=wo%00wa", "appCode"),
            ]
            for (query, names) in cases {
                let response = try await client.admin(.get, "/admin/deliveries?\(query)")
                #expect(
                    response.status == .badRequest && response.code == "VALIDATION_FAILED" && response.message.contains(names),
                    "\(query): \(response.text)")
            }
            #expect(try await client.admin(.get, "/admin/deliveries?limit=1000").status == .ok)
        }
    }

    @Test func deliveriesPageByCursorUntilNull() async throws {
        let fixture = try await APIFixture.make()
        let scenario = try await fixture.scenario()
        let ids = scenario.deliveries
        try await fixture.admin { client in
            var pages: [[Int64]] = []
            var cursor: String?
            repeat {
                let page = try await client.admin(.get, "/admin/deliveries?limit=2" + (cursor.map { "&cursor=\($0)" } ?? ""))
                pages.append(page.deliveryIDs)
                cursor = page.json["nextCursor"] as? String
                #expect(cursor != nil || page.json["nextCursor"] is NSNull)
            } while cursor != nil && pages.count < 10
            #expect(pages == [[ids[4], ids[3]], [ids[2], ids[1]], [ids[0]]])
            let exact = try await client.admin(.get, "/admin/deliveries?limit=2&cursor=\(ids[2])")
            #expect(exact.deliveryIDs == [ids[1], ids[0]] && exact.json["nextCursor"] is NSNull)
        }
    }

    /// Walks one job's log page by page while another task keeps adding deliveries to that job.
    @Test func pagingIsStableUnderConcurrentInserts() async throws {
        let fixture = try await APIFixture.make()
        let (job, before) = try await fixture.database.seed { seed in
            let app = fixture.appID
            try await seed.run(
                """
                INSERT INTO push_devices (user_id, app_id, token, platform)
                SELECT g, \(app), 'walk-token-' || g, 'android' FROM generate_series(1, 400) g
                """)
            let (job, noise) = (try await seed.job(users: nil), try await seed.job(users: nil))
            // Interleaved with another job's rows, which the filter must leave out.
            try await seed.run(
                """
                INSERT INTO push_deliveries (job_id, device_id, status, job_created_at, app_id)
                SELECT j.id, d.id, 'sent', j.created_at, j.app_id
                  FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM push_devices) d
                  JOIN push_jobs j ON j.id = CASE WHEN n % 3 = 0 THEN \(noise) ELSE \(job) END
                 WHERE n <= 150
                """)
            return (
                job,
                try await seed.value("SELECT array_agg(id ORDER BY id) FROM push_deliveries WHERE job_id = \(job)", as: [Int64].self) ?? []
            )
        }
        let (inserted, insert) = AsyncStream.makeStream(of: Int64.self)
        let inserter = Task {
            try await fixture.database.seed { seed in
                for device in try await seed.value("SELECT array_agg(id ORDER BY id) FROM push_devices", as: [Int64].self)!.dropFirst(150) {
                    insert.yield(try await seed.delivery(job: job, device: device, status: .pending))
                    try await Task.sleep(for: .milliseconds(5))
                }
            }
        }
        let count: PostgresQuery = "SELECT count(*)::text FROM push_deliveries WHERE job_id = \(job)"
        let atStart = try await fixture.database.text(count)
        let seen = try await fixture.admin { client in
            var seen: [Int64] = []
            var cursor: String?
            var newRows = inserted.makeAsyncIterator()
            repeat {
                let page = try await client.admin(.get, "/admin/deliveries?jobId=\(job)&limit=7" + (cursor.map { "&cursor=\($0)" } ?? ""))
                #expect(page.status == .ok)
                seen += page.deliveryIDs
                cursor = page.json["nextCursor"] as? String
                // At least one more delivery is committed before the next page is read.
                _ = await newRows.next()
            } while cursor != nil && seen.count < 1000
            return seen
        }
        let atEnd = try await fixture.database.text(count)
        inserter.cancel()
        _ = await inserter.result
        let after = try await fixture.database.seed {
            try await $0.value("SELECT array_agg(id) FROM push_deliveries WHERE job_id = \(job)", as: [Int64].self) ?? []
        }
        #expect(before.count == 100 && Int(atEnd)! > Int(atStart)! + 5, "the walk must overlap the inserts: \(atStart) → \(atEnd)")
        #expect(Set(seen).count == seen.count, "no delivery is seen twice")
        #expect(zip(seen, seen.dropFirst()).allSatisfy { $0 > $1 }, "ids strictly decrease")
        #expect(Set(before).isSubset(of: Set(seen)), "every delivery that existed before the walk is seen")
        #expect(Set(seen).isSubset(of: Set(after)), "only this job's deliveries")
    }
}
