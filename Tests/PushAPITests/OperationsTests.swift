import Foundation
import Hummingbird
import HummingbirdTesting
import NIOCore
import PushAPI
import TestSupport
import Testing

@Suite("Operations endpoints")
struct OperationsTests {
    @Test func healthReadinessAndRequestIDs() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test { client in
            let health = try await client.execute(uri: "/healthz", method: .get)
            #expect(health.status == .ok && health.json["status"] as? String == "ok")
            let ready = try await client.execute(uri: "/readyz", method: .get)
            #expect(ready.status == .ok && ready.json["status"] as? String == "ready")
            #expect(ready.headers[.init("X-Request-Id")!]?.isEmpty == false)
            for path in ["/healthz", "/readyz"] {
                let head = try await client.execute(uri: path, method: .head)
                #expect(head.status == .ok && head.body.readableBytes == 0, "HEAD \(path)")
            }
        }
    }

    @Test func metricsCountRequestsByRouteAndStatusWithLatencyHistogram() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test { client in
            _ = try await client.register(token: "metered", as: fixture.token())
            _ = try await client.register(token: "metered", as: fixture.token())
            _ = try await client.send(.get, "/push/devices", token: nil)
            let text = try await client.execute(uri: "/metrics", method: .get).text
            #expect(text.contains(#"http_requests_total{method="POST",route="/push/devices",status="201"} 1"#))
            #expect(text.contains(#"http_requests_total{method="POST",route="/push/devices",status="200"} 1"#))
            #expect(text.contains(#"http_requests_total{method="GET",route="/push/devices",status="401"} 1"#))
            #expect(text.contains(#"http_request_duration_seconds_count{method="POST",route="/push/devices"} 2"#))
            #expect(text.contains("http_request_duration_seconds_bucket"))
        }
    }

    /// `/openapi.yaml` is kept true: every operation it declares is routed, and answers with
    /// one of the statuses it declares for it, with the admin endpoints enabled and disabled.
    @Test(arguments: [true, false])
    func everyDeclaredOperationIsServedWithADeclaredStatus(adminEnabled: Bool) async throws {
        let fixture = try await APIFixture.make()
        var configuration = fixture.configuration()
        configuration.adminToken = adminEnabled ? Self.adminToken : nil
        let app = try await buildApplication(configuration, logger: apiLogger)
        try await app.test(.live) { client in
            let document = try await client.execute(uri: "/openapi.yaml", method: .get)
            #expect(document.status == .ok)
            let operations = OpenAPIOperations.parse(document.text)
            #expect(operations.count == 15)
            for operation in operations {
                let uri = operation.path.replacingOccurrences(of: "{id}", with: "1")
                let isAdmin = !operation.path.hasPrefix("/push/devices")
                let json: String? =
                    switch (operation.method, isAdmin) {
                    case (.post, false): #"{"token":"openapi-walk","platform":"web"}"#
                    case (.post, true): #"{"appCode":"wowa","userIds":[1],"message":{"notification":{"title":"walk"}}}"#
                    default: nil
                    }
                let response = try await client.send(operation.method, uri, token: isAdmin ? Self.adminToken : fixture.token(), json: json)
                #expect(
                    operation.statuses.contains(Int(response.status.code)),
                    "\(operation.method) \(operation.path) answered \(response.status.code), declared \(operation.statuses)")
                if response.status.code >= 400 {
                    #expect(response.json["code"] != nil, "\(operation.method) \(operation.path) error without the envelope")
                }
            }
        }
    }

    static let adminToken = "openapi-walk-admin-token-0123456789"

    @Test func everyRouteTheRouterServesIsDeclared() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test { client in
            let declared = OpenAPIOperations.parse(try await client.execute(uri: "/openapi.yaml", method: .get).text)
                .map { "\($0.method) \($0.path)" }
            let served = [
                "POST /push/devices", "GET /push/devices", "DELETE /push/devices/{id}", "GET /healthz", "GET /readyz", "HEAD /healthz",
                "HEAD /readyz",
                "GET /metrics", "GET /openapi.yaml", "POST /push/notifications", "GET /admin/jobs", "GET /admin/jobs/{id}",
                "DELETE /admin/jobs/{id}", "POST /admin/jobs/{id}/cancel", "GET /admin/deliveries",
            ]
            // Every route of the router (Sources/PushAPI/Application+build.swift) appears.
            #expect(Set(served).subtracting(declared).isEmpty)
        }
    }
}

/// Reads paths, methods and response codes out of our own openapi.yaml (two-space YAML).
struct OpenAPIOperations {
    let path: String
    let method: HTTPRequest.Method
    let statuses: Set<Int>

    static func parse(_ yaml: String) -> [OpenAPIOperations] {
        var result: [OpenAPIOperations] = []
        var inPaths = false
        var path: String?
        var method: HTTPRequest.Method?
        var statuses: Set<Int> = []
        func flush() {
            if let path, let method { result.append(.init(path: path, method: method, statuses: statuses)) }
            method = nil
            statuses = []
        }
        for line in yaml.split(separator: "\n", omittingEmptySubsequences: false) {
            let indent = line.prefix { $0 == " " }.count
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if indent == 0 {
                if inPaths { flush() }
                inPaths = trimmed == "paths:"
                continue
            }
            guard inPaths else { continue }
            if indent == 2, trimmed.hasSuffix(":") {
                flush()
                path = String(trimmed.dropLast())
            } else if indent == 4, trimmed.hasSuffix(":"), let m = HTTPRequest.Method(String(trimmed.dropLast()).uppercased()) {
                flush()
                method = m
            } else if indent == 8, trimmed.hasPrefix("'"), let code = Int(trimmed.dropFirst().prefix(3)) {
                statuses.insert(code)
            }
        }
        flush()
        return result
    }
}
