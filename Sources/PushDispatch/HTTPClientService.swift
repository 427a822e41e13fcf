import AsyncHTTPClient
import ServiceLifecycle

/// The token endpoint's HTTP client as a service of the worker's group: open until the group
/// shuts it down (after the Dispatcher, which comes later in the group) or is cancelled, then
/// shut down, as AsyncHTTPClient requires of every client it did not share.
struct HTTPClientService: Service {
    let client: HTTPClient

    func run() async throws {
        try? await gracefulShutdown()
        try await client.shutdown()
    }
}
