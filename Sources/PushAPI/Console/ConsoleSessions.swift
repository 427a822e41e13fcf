import Crypto
import Foundation
import Synchronization

/// A signed-in browser: the random id its cookie carries and when the cookie stops being accepted.
struct ConsoleSession: Sendable, Equatable {
    let id: String
    let expires: Date
}

/// The console's session cookies and CSRF tokens, signed with a key derived from
/// `PUSH_ADMIN_TOKEN`: nothing is stored per session, so every push-api replica accepts the
/// cookies of the others and a restart signs nobody out, while rotating the admin token ends
/// every session at once. Signed-out sessions are kept in the database (``ConsoleSignOuts``).
final class ConsoleSessions: Sendable {
    static let cookieName = "push_console_session"
    /// Set by the sign-in form's GET, so that its POST can prove it came from our own form.
    static let signInCookieName = "push_console_sign_in"
    static let lifetime: Duration = .seconds(12 * 3600)
    static let signInFormLifetime: Duration = .seconds(3600)

    private let key: SymmetricKey
    /// SHA-256 of the admin token: two digests of one length compare in constant time.
    private let adminTokenDigest: [UInt8]

    init(adminToken: String) {
        key = HKDF<SHA256>.deriveKey(
            inputKeyMaterial: SymmetricKey(data: Array(adminToken.utf8)),
            info: Array("push-service console session".utf8), outputByteCount: 32)
        adminTokenDigest = Array(SHA256.hash(data: Array(adminToken.utf8)))
    }

    /// Whether the sign-in form was given the admin token.
    func acceptsAdminToken(_ presented: String) -> Bool {
        let digest = Array(SHA256.hash(data: Array(presented.utf8)))
        var difference: UInt8 = 0
        for (a, b) in zip(digest, adminTokenDigest) { difference |= a ^ b }
        return difference == 0
    }

    /// A new session and the cookie value that carries it: `id.expiry.signature`.
    func start(now: Date = Date()) -> (session: ConsoleSession, cookieValue: String) {
        let id = Self.randomHex(bytes: 16)
        let expires = Date(
            timeIntervalSince1970: (now.timeIntervalSince1970 + TimeInterval(Self.lifetime.components.seconds)).rounded(.down))
        let payload = "\(id).\(Int64(expires.timeIntervalSince1970))"
        return (ConsoleSession(id: id, expires: expires), payload + "." + sign("session|" + payload))
    }

    /// The session a cookie value carries, when its signature holds and it has not expired.
    func session(cookieValue: String, now: Date = Date()) -> ConsoleSession? {
        let parts = cookieValue.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let seconds = Int64(parts[1]) else { return nil }
        let payload = "\(parts[0]).\(parts[1])"
        guard Self.constantTimeEqual(sign("session|" + payload), String(parts[2])) else { return nil }
        let session = ConsoleSession(id: String(parts[0]), expires: Date(timeIntervalSince1970: TimeInterval(seconds)))
        return session.expires > now ? session : nil
    }

    /// The CSRF token of every state-changing form of a session: bound to the session, so a
    /// token read from one session (or guessed) is refused in another.
    func csrfToken(for session: ConsoleSession) -> String {
        sign("csrf|" + session.id)
    }

    func acceptsCSRFToken(_ token: String?, for session: ConsoleSession) -> Bool {
        guard let token else { return false }
        return Self.constantTimeEqual(csrfToken(for: session), token)
    }

    /// The sign-in form's nonce (its cookie) and the token its hidden field carries.
    func startSignInForm() -> (nonce: String, token: String) {
        let nonce = Self.randomHex(bytes: 16)
        return (nonce, sign("sign-in|" + nonce))
    }

    func acceptsSignInForm(nonce: String?, token: String?) -> Bool {
        guard let nonce, let token, !nonce.isEmpty else { return false }
        return Self.constantTimeEqual(sign("sign-in|" + nonce), token)
    }

    private func sign(_ text: String) -> String {
        let mac = HMAC<SHA256>.authenticationCode(for: Array(text.utf8), using: key)
        return Data(mac).base64EncodedString().replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    /// Compares every byte whatever the first difference, so timing tells nothing about a guess.
    static func constantTimeEqual(_ left: String, _ right: String) -> Bool {
        let (a, b) = (Array(left.utf8), Array(right.utf8))
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for (x, y) in zip(a, b) { difference |= x ^ y }
        return difference == 0
    }

    private static func randomHex(bytes: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<bytes).map { _ in String(format: "%02x", UInt8.random(in: .min ... .max, using: &generator)) }.joined()
    }
}
