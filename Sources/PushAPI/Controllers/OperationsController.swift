import DeviceRegistry
import Foundation
import Hummingbird
import Logging
import PostgresNIO
import ServiceSupport

/// `/healthz` (the process answers), `/readyz` (the database answers), both also for HEAD,
/// `/metrics`, `/openapi.yaml`.
struct OperationsController {
    let client: PostgresClient
    let metrics: RequestMetrics
    let openAPIDocument: ByteBuffer

    func addRoutes(to router: Router<APIRequestContext>) {
        router.get("healthz") { _, _ in
            JSONBody.response(["status": "ok"])
        }
        router.get("readyz") { _, context in
            try await checkDatabase(logger: context.logger)
            return JSONBody.response(["status": "ready"])
        }
        // Health checks that send HEAD (HAProxy's, some load balancers'): the status, no body.
        router.head("healthz") { _, _ in Response(status: .ok) }
        router.head("readyz") { _, context in
            Response(status: (try? await checkDatabase(logger: context.logger)) != nil ? .ok : .serviceUnavailable)
        }
        router.get("metrics") { _, _ in
            Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(string: metrics.text())))
        }
        router.get("openapi.yaml") { _, _ in
            Response(status: .ok, headers: [.contentType: "application/yaml"], body: .init(byteBuffer: openAPIDocument))
        }
    }

    /// Readiness must answer quickly even when the pool is waiting for a dead database.
    private func checkDatabase(logger: Logger) async throws {
        do {
            try await DatabaseReachability.ping(client, within: .seconds(2), logger: logger)
        } catch {
            throw APIError.databaseUnavailable
        }
    }
}
