import AsyncHTTPClient
import FCMEmulator
import Foundation
import NIOCore
import NIOHTTP1
import NIOSSL
import _CryptoExtras

/// RSA-2048 generation is slow in debug builds, so the suites share these accounts.
enum Fixtures {
    static let projectID = "project-a"
    private static let primaryResult = Result { try ServiceAccountFixture.generate(projectID: projectID) }
    private static let strangerResult = Result {
        try ServiceAccountFixture.generate(projectID: "project-b", clientEmail: "stranger@project-b.iam.gserviceaccount.com")
    }

    static func primary() throws -> ServiceAccountFixture { try primaryResult.get() }
    static func stranger() throws -> ServiceAccountFixture { try strangerResult.get() }
}

/// A compact JWS built by hand, so tests control every byte the emulator checks.
struct Assertion {
    var header: String
    var claims: String

    init(
        kid: String?, iss: String, aud: String, iat: String, exp: String,
        scope: String = "https://www.googleapis.com/auth/firebase.messaging"
    ) {
        header = kid.map { #"{"alg":"RS256","typ":"JWT","kid":"\#($0)"}"# } ?? #"{"alg":"RS256","typ":"JWT"}"#
        claims = #"{"iss":"\#(iss)","scope":"\#(scope)","aud":"\#(aud)","iat":\#(iat),"exp":\#(exp)}"#
    }

    /// The standard assertion for `fixture`: iat backdated 10 s, one hour lifetime.
    static func standard(for fixture: ServiceAccountFixture, audience: String, now: Int = Int(Date().timeIntervalSince1970)) -> Assertion {
        Assertion(kid: fixture.privateKeyID, iss: fixture.clientEmail, aud: audience, iat: "\(now - 10)", exp: "\(now - 10 + 3600)")
    }

    func signed(with key: _RSA.Signing.PrivateKey) throws -> String {
        let signingInput = Self.base64URL(Data(header.utf8)) + "." + Self.base64URL(Data(claims.utf8))
        let signature = try key.signature(for: Data(signingInput.utf8), padding: .insecurePKCS1v1_5)
        return signingInput + "." + Self.base64URL(signature.rawRepresentation)
    }

    static func base64URL(_ data: Data) -> String {
        data.base64EncodedString()
            .replacingOccurrences(of: "+", with: "-")
            .replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}

/// A response, read whole.
struct HTTPResult {
    var status: Int
    var headers: HTTPHeaders
    var version: HTTPVersion
    var body: String

    var json: [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any] ?? [:]
    }

    var error: [String: Any] { json["error"] as? [String: Any] ?? [:] }
    var rpcStatus: String? { error["status"] as? String }
    var errorMessage: String? { error["message"] as? String }
    private var details: [[String: Any]] { error["details"] as? [[String: Any]] ?? [] }

    /// `errorCode` of the `google.firebase.fcm.v1.FcmError` detail.
    var fcmErrorCode: String? {
        details.first { $0["@type"] as? String == "type.googleapis.com/google.firebase.fcm.v1.FcmError" }?["errorCode"] as? String
    }

    var violatedFields: [String] {
        details
            .filter { $0["@type"] as? String == "type.googleapis.com/google.rpc.BadRequest" }
            .flatMap { $0["fieldViolations"] as? [[String: Any]] ?? [] }
            .compactMap { $0["field"] as? String }
    }
}

/// A running emulator and an HTTP client (HTTP/2 when negotiated) that trusts its CA.
struct EmulatorSession {
    let emulator: RunningEmulator
    let client: HTTPClient

    static func with<T>(
        _ configuration: FCMEmulator.Configuration = .init(),
        _ body: (EmulatorSession) async throws -> T
    ) async throws -> T {
        try await FCMEmulator.withRunning(configuration) { emulator in
            var clientConfiguration = HTTPClient.Configuration()
            if let caFile = emulator.caFilePath {
                var tls = TLSConfiguration.makeClientConfiguration()
                tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(caFile))
                clientConfiguration.tlsConfiguration = tls
            }
            clientConfiguration.httpVersion = .automatic
            let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: clientConfiguration)
            do {
                let result = try await body(EmulatorSession(emulator: emulator, client: client))
                try await client.shutdown()
                return result
            } catch {
                try? await client.shutdown()
                throw error
            }
        }
    }

    func request(
        _ method: HTTPMethod = .POST,
        _ path: String,
        body: String? = nil,
        headers: [(String, String)] = []
    ) async throws -> HTTPResult {
        var request = HTTPClientRequest(url: emulator.baseURL + path)
        request.method = method
        for (name, value) in headers {
            request.headers.add(name: name, value: value)
        }
        if let body {
            request.body = .bytes(ByteBuffer(string: body))
        }
        let response = try await client.execute(request, timeout: .seconds(30))
        let responseBody = try await response.body.collect(upTo: 1 << 22)
        return HTTPResult(
            status: Int(response.status.code),
            headers: response.headers,
            version: response.version,
            body: String(buffer: responseBody)
        )
    }

    func exchange(assertion: String, grantType: String = "urn:ietf:params:oauth:grant-type:jwt-bearer") async throws -> HTTPResult {
        let form = "grant_type=\(Self.formEncoded(grantType))&assertion=\(Self.formEncoded(assertion))"
        return try await request(.POST, "/token", body: form, headers: [("Content-Type", "application/x-www-form-urlencoded")])
    }

    /// Registers `fixture` and mints an access token for it.
    func accessToken(for fixture: ServiceAccountFixture) async throws -> String {
        emulator.registerServiceAccount(fixture.serviceAccount)
        let result = try await exchange(
            assertion: Assertion.standard(for: fixture, audience: emulator.tokenURL).signed(with: fixture.privateKey))
        guard result.status == 200, let token = result.json["access_token"] as? String else {
            throw SessionError.tokenExchangeFailed(result.body)
        }
        return token
    }

    func send(project: String = Fixtures.projectID, accessToken: String?, body: String) async throws -> HTTPResult {
        var headers = [("Content-Type", "application/json")]
        if let accessToken { headers.append(("Authorization", "Bearer \(accessToken)")) }
        return try await request(.POST, "/v1/projects/\(project)/messages:send", body: body, headers: headers)
    }

    /// `{"message":{"token":…,"data":{"k":"v"}}}`
    static func message(token: String, data: String = #"{"kind":"test"}"#) -> String {
        #"{"message":{"token":"\#(token)","data":\#(data)}}"#
    }

    private static func formEncoded(_ value: String) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return value.addingPercentEncoding(withAllowedCharacters: allowed) ?? value
    }

    enum SessionError: Error {
        case tokenExchangeFailed(String)
    }
}
