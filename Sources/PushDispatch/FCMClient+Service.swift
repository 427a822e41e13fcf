import ServiceLifecycle

/// The FCM connections (both pools) as a service of the worker's group: open until the group
/// shuts it down (after the Dispatcher, which comes later in the group) or is cancelled, then
/// closed.
extension FCMClient: Service {
    public func run() async throws {
        try? await gracefulShutdown()
        await close()
    }
}
