import AsyncHTTPClient
import DeviceRegistry
import Foundation
import Logging
import NIOCore
import WireFormats

/// Why no access token could be had.
public enum AccessTokenError: Error, CustomStringConvertible, Equatable {
    /// The token endpoint refused these credentials: permanent until the credentials change.
    /// `invalidGrant`: Google's `invalid_grant`, which is also its answer for a key created a
    /// moment ago (new keys take a minute or more to be accepted everywhere).
    case refused(String, invalidGrant: Bool = false)
    case unreadablePrivateKey
    /// 5xx, 408, 429 or a transport failure: worth retrying, not before `retryAfter` when known.
    case transient(String, retryAfter: Duration? = nil)
    /// Unavailable for longer than a delivery may wait: retries are bounded in time too.
    case outage(String, longerThan: Duration)

    public var description: String {
        switch self {
        case .refused(let reason, _): "token endpoint refused the credentials: \(reason)"
        case .unreadablePrivateKey: "the service account's private key cannot be read"
        case .transient(let reason, _): "token endpoint unavailable: \(reason)"
        case .outage(let reason, let bound): "token endpoint unavailable for over \(bound.components.seconds) s: \(reason)"
        }
    }

    var isPermanent: Bool {
        if case .transient = self { return false }
        return true
    }

    /// The delivery log's `error_code` when this error ends a delivery.
    var errorCode: DeliveryErrorCode {
        if case .outage = self { return .oauthUnavailable }
        return .oauth
    }
}

/// One OAuth2 access token per service account, shared by every send of this process:
/// reused until shortly before it expires, refreshed by one caller while the others wait for
/// that refresh (never minted in parallel), dropped after a 401 from FCM. A refused credential
/// is remembered for a while, and an unavailable endpoint is backed off from (1 s doubling to a
/// minute, or its Retry-After), so the token endpoint is never hammered. An endpoint unavailable
/// for longer than `longestOutage` is reported as permanent until it answers again, so that the
/// jobs waiting for it end instead of waiting without a bound. An `invalid_grant` for a key this
/// process first used less than `newKeyGrace` ago is waited for like an unavailable endpoint:
/// Google takes a minute or more to accept a new key, and a rotation must not fail the jobs
/// running meanwhile.
public actor AccessTokenCache {
    struct Key: Hashable {
        let clientEmail: String
        let keyFingerprint: Int
        init(_ account: ServiceAccount) {
            clientEmail = account.clientEmail
            keyFingerprint = account.privateKeyPEM.hashValue
        }
    }

    private enum Entry {
        case valid(token: String, refreshAfter: ContinuousClock.Instant)
        case refreshing([CheckedContinuation<String, any Error>])
        case refused(AccessTokenError, until: ContinuousClock.Instant)
        case unavailable(reason: String, until: ContinuousClock.Instant, failures: Int, since: ContinuousClock.Instant)
    }

    private var entries: [Key: Entry] = [:]
    /// When each key was first asked for.
    private var firstUse: [Key: ContinuousClock.Instant] = [:]
    private let exchange: GoogleTokenExchange
    /// Refresh this long before expiry (Google's libraries use 3¾–5 minutes).
    private let refreshMargin: Duration
    private let refusalMemory: Duration
    private let longestOutage: Duration
    private let newKeyGrace: Duration
    private let onRefresh: @Sendable () -> Void

    init(
        exchange: GoogleTokenExchange, refreshMargin: Duration = .seconds(240), refusalMemory: Duration = .seconds(60),
        longestOutage: Duration = .seconds(3600), newKeyGrace: Duration = .seconds(180),
        onRefresh: @escaping @Sendable () -> Void = {}
    ) {
        self.newKeyGrace = newKeyGrace
        self.exchange = exchange
        self.onRefresh = onRefresh
        self.refreshMargin = refreshMargin
        self.refusalMemory = refusalMemory
        self.longestOutage = longestOutage
    }

    public func token(for account: ServiceAccount) async throws -> String {
        let key = Key(account)
        if firstUse[key] == nil { firstUse[key] = ContinuousClock.now }
        switch entries[key] {
        case .valid(let token, let refreshAfter) where ContinuousClock.now < refreshAfter:
            return token
        case .refreshing(var waiters):
            return try await withCheckedThrowingContinuation { continuation in
                waiters.append(continuation)
                entries[key] = .refreshing(waiters)
            }
        case .refused(let error, let until) where ContinuousClock.now < until:
            throw error
        case .unavailable(let reason, let until, _, let since) where ContinuousClock.now < until:
            throw unavailable(reason, until: until, since: since)
        case .unavailable(_, _, let failures, let since):
            return try await refresh(key, account, failuresBefore: failures, unavailableSince: since)
        default:
            return try await refresh(key, account, failuresBefore: 0, unavailableSince: nil)
        }
    }

    private func unavailable(_ reason: String, until: ContinuousClock.Instant, since: ContinuousClock.Instant) -> AccessTokenError {
        let now = ContinuousClock.now
        return now - since > longestOutage ? .outage(reason, longerThan: longestOutage) : .transient(reason, retryAfter: until - now)
    }

    /// FCM answered 401 to `token`: the next caller mints a new one (unless someone already did).
    public func invalidate(_ token: String, for account: ServiceAccount) {
        let key = Key(account)
        if case .valid(let cached, _) = entries[key], cached == token { entries[key] = nil }
    }

    private func refresh(
        _ key: Key, _ account: ServiceAccount, failuresBefore: Int,
        unavailableSince: ContinuousClock.Instant?
    ) async throws -> String {
        entries[key] = .refreshing([])
        onRefresh()
        let result: Result<GoogleTokenExchange.Grant, AccessTokenError>
        do {
            result = .success(try await exchange.grant(for: account))
        } catch let error as AccessTokenError {
            result = .failure(error)
        } catch {
            result = .failure(.transient("\(error)"))
        }
        guard case .refreshing(let waiters) = entries[key] else { preconditionFailure("refresh owns the entry") }
        switch result {
        case .success(let grant):
            let lifetime = max(grant.expiresIn - refreshMargin, grant.expiresIn / 2)
            entries[key] = .valid(token: grant.accessToken, refreshAfter: ContinuousClock.now + lifetime)
            for waiter in waiters { waiter.resume(returning: grant.accessToken) }
            return grant.accessToken
        case .failure(.transient(let reason, let retryAfter)):
            throw backOff(key, waiters, reason: reason, retryAfter: retryAfter, failuresBefore: failuresBefore, since: unavailableSince)
        case .failure(.refused(let reason, invalidGrant: true))
        where ContinuousClock.now - (firstUse[key] ?? ContinuousClock.now) < newKeyGrace:
            let waited = "\(reason) (a key is taken for \(newKeyGrace.components.seconds) s after its first use: new keys take a while)"
            throw backOff(key, waiters, reason: waited, retryAfter: nil, failuresBefore: failuresBefore, since: unavailableSince)
        case .failure(let error):
            entries[key] = .refused(error, until: ContinuousClock.now + refusalMemory)
            for waiter in waiters { waiter.resume(throwing: error) }
            throw error
        }
    }
}

extension AccessTokenCache {
    /// The endpoint is waited for: 1 s doubling to a minute, or its Retry-After when longer.
    private func backOff(
        _ key: Key, _ waiters: [CheckedContinuation<String, any Error>], reason: String, retryAfter: Duration?, failuresBefore: Int,
        since unavailableSince: ContinuousClock.Instant?
    ) -> AccessTokenError {
        let backoff = Duration.seconds(min(1 << min(failuresBefore, 6), 60))
        let since = unavailableSince ?? ContinuousClock.now
        let until = ContinuousClock.now + max(backoff, retryAfter ?? .zero)
        entries[key] = .unavailable(reason: reason, until: until, failures: failuresBefore + 1, since: since)
        let error = unavailable(reason, until: until, since: since)
        for waiter in waiters { waiter.resume(throwing: error) }
        return error
    }
}

/// `POST <token URL>` with the signed assertion (fcm-protocol.md §1).
struct GoogleTokenExchange: Sendable {
    let http: HTTPClient
    let tokenURL: String
    let timeout: Duration

    struct Grant: Sendable {
        let accessToken: String
        let expiresIn: Duration

        /// What the token endpoint's answer means: a grant, or why there is none. The token
        /// goes into every send's `authorization` header: one that is not an RFC 6750 bearer
        /// token (a control character, a space, over 4 KiB; Google's are ~200 bytes of
        /// base64url and dots) would have every send refused or reset, so the endpoint is
        /// treated as unavailable instead. The lifetime is kept within a minute and a day
        /// (Google's is an hour): with `expires_in` 0 every send would exchange anew.
        static func read(status: UInt, body: ByteBuffer, retryAfter: Duration?) throws(AccessTokenError) -> Grant {
            let json = body.withUnsafeReadableBytes { try? JSONParser.parse($0) }
            switch status {
            case 200:
                guard let token = json?["access_token"]?.string, !token.isEmpty else {
                    throw .transient("no access_token in the answer")
                }
                guard token.utf8.count <= 4096, token.utf8.allSatisfy(bearerTokenBytes.contains) else {
                    throw .transient("the access_token in the answer is not a bearer token (RFC 6750)")
                }
                // It may arrive as a string.
                let expiresIn = json?["expires_in"]
                let seconds = expiresIn?.integer ?? expiresIn?.string.flatMap { Int64($0) } ?? 3600
                return Grant(accessToken: token, expiresIn: .seconds(min(max(seconds, 60), 86_400)))
            // 407: a proxy on the way wants credentials; Google has not seen the request.
            case 407, 408, 429, 500...599:
                throw .transient("HTTP \(status)", retryAfter: retryAfter)
            default:
                let error = json?["error"]?.string ?? "HTTP \(status)"
                let description = json?["error_description"]?.string
                throw .refused(description ?? error, invalidGrant: error == "invalid_grant")
            }
        }

        private static let bearerTokenBytes = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/=".utf8)
    }

    func grant(for account: ServiceAccount) async throws -> Grant {
        let assertion = try await ServiceAccountAssertion(account).signed(audience: tokenURL)
        var request = HTTPClientRequest(url: tokenURL)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/x-www-form-urlencoded")
        request.body = .bytes(ByteBuffer(string: "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=\(assertion)"))
        let status: UInt
        let body: ByteBuffer
        let retryAfter: Duration?
        do {
            let response = try await http.execute(request, timeout: TimeAmount(timeout))
            status = response.status.code
            retryAfter = response.headers.first(name: "Retry-After").flatMap(SendOutcome.parseRetryAfter)
            body = try await response.body.collect(upTo: 64 * 1024)
        } catch {
            throw AccessTokenError.transient("\(error)")
        }
        return try Grant.read(status: status, body: body, retryAfter: retryAfter)
    }
}
