import Hummingbird

/// The request context: the authenticated app user, once a middleware has verified them,
/// and the API's body limit (16 KiB: a registration is a few hundred bytes).
public struct APIRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    public var appUser: AppUser?

    public init(source: Source) {
        self.coreContext = .init(source: source)
    }

    public var maxUploadSize: Int { 16 * 1024 }

    /// The authenticated user; only routes behind `AppUserAuthenticator` call this.
    func requireAppUser() throws -> AppUser {
        guard let appUser else { throw APIError.unauthenticated("authentication required") }
        return appUser
    }
}
