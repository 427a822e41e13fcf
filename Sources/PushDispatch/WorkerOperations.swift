import DeviceRegistry
import Hummingbird
import Logging
import NIOCore
import PostgresNIO
import ServiceLifecycle
import ServiceSupport

/// `/metrics`, `/healthz`, `/readyz` (the last two also for HEAD) on METRICS_HOST:METRICS_PORT.
public func buildWorkerOperations(host: String, port: Int, client: PostgresClient, metrics: DispatchMetrics, logger: Logger) -> some Service
{
    Application(
        router: workerOperationsRouter(client: client, metrics: metrics, logger: logger),
        configuration: .init(address: .hostname(host, port: port), serverName: "push-worker"), logger: logger)
}

/// The routes apart from the server, so that docs/contract.md can be checked against them.
func workerOperationsRouter(client: PostgresClient, metrics: DispatchMetrics, logger: Logger) -> Router<BasicRequestContext> {
    let router = Router()
    @Sendable func databaseAnswers() async -> Bool {
        (try? await DatabaseReachability.ping(client, within: .seconds(2), logger: logger)) != nil
    }
    router.get("healthz") { _, _ in #"{"status":"ok"}"# }
    router.get("readyz") { _, _ -> Response in
        if await databaseAnswers() {
            return Response(status: .ok, body: .init(byteBuffer: ByteBuffer(string: #"{"status":"ready"}"#)))
        } else {
            return Response(
                status: .serviceUnavailable, headers: [.contentType: "application/json"],
                body: .init(
                    byteBuffer: ByteBuffer(
                        string: #"{"code":"DATABASE_UNAVAILABLE","status":"SERVICE_UNAVAILABLE","message":"the database is unavailable"}"#))
            )
        }
    }
    // Health checks that send HEAD (HAProxy's, some load balancers'): the status, no body.
    router.head("healthz") { _, _ in Response(status: .ok) }
    router.head("readyz") { _, _ in Response(status: await databaseAnswers() ? .ok : .serviceUnavailable) }
    router.get("metrics") { _, _ in
        Response(
            status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(string: metrics.text())))
    }
    return router
}
