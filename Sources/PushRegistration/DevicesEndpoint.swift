import Foundation

#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

/// push-api's three device calls over URLSession: each request is sent once and its answer read
/// by `ServerAnswer`. Registering is an upsert and deactivating is idempotent, so sending either
/// again after a lost answer changes nothing.
struct DevicesEndpoint: Sendable {
    let baseURL: URL
    let platform: PushRegistrar.Platform
    let timeout: Duration
    let session: URLSession

    init(baseURL: URL, platform: PushRegistrar.Platform, timeout: Duration) {
        self.baseURL = baseURL
        self.platform = platform
        self.timeout = timeout
        let configuration = URLSessionConfiguration.ephemeral
        // Answers hold tokens: nothing cached, no cookies (the access token goes as a bearer).
        configuration.urlCache = nil
        configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
        configuration.httpShouldSetCookies = false
        configuration.httpCookieAcceptPolicy = .never
        session = URLSession(configuration: configuration)
    }

    func register(fcmToken: String, installationID: String, accessToken: String) async -> Answer<Int64> {
        struct Body: Encodable {
            let token: String
            let platform: String
            let deviceId: String
        }
        var request = request("POST", path: "push/devices", accessToken: accessToken)
        request.setValue("application/json", forHTTPHeaderField: "Content-Type")
        // Encoding three strings cannot fail.
        request.httpBody = try? JSONEncoder().encode(Body(token: fcmToken, platform: platform.rawValue, deviceId: installationID))
        switch await exchange(request) {
        case .answered(let status, let body, let retryAfter):
            return ServerAnswer.registration(status: status, body: body, retryAfter: retryAfter, now: Date())
        case .unanswered(let reason):
            return .retry(after: nil, reason: reason)
        }
    }

    func deactivate(row: Int64, accessToken: String) async -> Answer<Deactivated> {
        switch await exchange(request("DELETE", path: "push/devices/\(row)", accessToken: accessToken)) {
        case .answered(let status, let body, let retryAfter):
            return ServerAnswer.deactivation(row: row, status: status, body: body, retryAfter: retryAfter, now: Date())
        case .unanswered(let reason):
            return .retry(after: nil, reason: reason)
        }
    }

    /// Deactivates the account's rows with `installationID`: one of them is enough, push-api
    /// deactivates the account's other active rows with the same `deviceId` with it.
    func deactivate(installationID: String, accessToken: String) async -> Answer<Deactivated> {
        switch await devices(accessToken: accessToken) {
        case .success(let devices):
            guard let row = devices.first(where: { $0.deviceId == installationID && $0.isActive }) else { return .success(.nothingActive) }
            return await deactivate(row: row.id, accessToken: accessToken)
        case .retry(let after, let reason): return .retry(after: after, reason: reason)
        case .unauthorized: return .unauthorized
        case .refused(let reason): return .refused(reason: reason)
        }
    }

    /// Every page of the account's devices, newest first.
    func devices(accessToken: String) async -> Answer<[RegisteredDevice.Wire]> {
        var devices: [RegisteredDevice.Wire] = []
        var cursor: String?
        repeat {
            var components = URLComponents(url: baseURL.appendingPathComponent("push/devices"), resolvingAgainstBaseURL: false)
            components?.queryItems =
                [URLQueryItem(name: "limit", value: "200")] + (cursor.map { [URLQueryItem(name: "cursor", value: $0)] } ?? [])
            guard let url = components?.url else { return .refused(reason: "no device list URL under \(baseURL)") }
            switch await exchange(request("GET", url: url, accessToken: accessToken)) {
            case .answered(let status, let body, let retryAfter):
                switch ServerAnswer.devicePage(status: status, body: body, retryAfter: retryAfter, now: Date()) {
                case .success(let page):
                    devices += page.devices
                    cursor = page.nextCursor
                case .retry(let after, let reason): return .retry(after: after, reason: reason)
                case .unauthorized: return .unauthorized
                case .refused(let reason): return .refused(reason: reason)
                }
            case .unanswered(let reason):
                return .retry(after: nil, reason: reason)
            }
        } while cursor != nil
        return .success(devices)
    }

    private func request(_ method: String, path: String, accessToken: String) -> URLRequest {
        request(method, url: baseURL.appendingPathComponent(path), accessToken: accessToken)
    }

    private func request(_ method: String, url: URL, accessToken: String) -> URLRequest {
        var request = URLRequest(url: url)
        request.httpMethod = method
        request.timeoutInterval = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
        request.setValue("Bearer \(accessToken)", forHTTPHeaderField: "Authorization")
        return request
    }

    private enum Exchange {
        case answered(status: Int, body: Data, retryAfter: String?)
        /// No answer: no connection, a timeout, a connection lost.
        case unanswered(reason: String)
    }

    private func exchange(_ request: URLRequest) async -> Exchange {
        do {
            let (body, response) = try await session.data(for: request)
            guard let http = response as? HTTPURLResponse else { return .unanswered(reason: "not an HTTP answer") }
            return .answered(status: http.statusCode, body: body, retryAfter: http.value(forHTTPHeaderField: "Retry-After"))
        } catch let error as URLError {
            return .unanswered(reason: "URLError \(error.code.rawValue): \(error.localizedDescription)")
        } catch {
            return .unanswered(reason: "\(error)")
        }
    }
}
