import DeviceRegistry
import FCMEmulator
import NIOCore
import Testing

@testable import PushDispatch

/// The token endpoint's answers as the cache reads them, and the cache against fcm-emulator's
/// token endpoint (the exchange also runs in FCMClientTests and the worker tests).
@Suite("Google's token endpoint answers")
struct AccessTokenCacheTests {
    private static func read(_ status: UInt, _ body: String, retryAfter: Duration? = nil) throws(AccessTokenError)
        -> GoogleTokenExchange.Grant
    {
        try GoogleTokenExchange.Grant.read(status: status, body: ByteBuffer(string: body), retryAfter: retryAfter)
    }

    @Test func aGrantIsItsTokenAndLifetime() throws {
        let grant = try Self.read(200, #"{"access_token":"ya29.c.b0Aa-_~+/x==","expires_in":3599,"token_type":"Bearer"}"#)
        #expect(grant.accessToken == "ya29.c.b0Aa-_~+/x==" && grant.expiresIn == .seconds(3599))
        #expect(try Self.read(200, #"{"access_token":"t","expires_in":"1800"}"#).expiresIn == .seconds(1800))
        #expect(try Self.read(200, #"{"access_token":"t"}"#).expiresIn == .seconds(3600))
    }

    /// `expires_in` 0 would have every send exchange anew; a year, a token kept past its revocation.
    @Test func theLifetimeIsKeptWithinAMinuteAndADay() throws {
        #expect(try Self.read(200, #"{"access_token":"t","expires_in":0}"#).expiresIn == .seconds(60))
        #expect(try Self.read(200, #"{"access_token":"t","expires_in":-5}"#).expiresIn == .seconds(60))
        #expect(try Self.read(200, #"{"access_token":"t","expires_in":31536000}"#).expiresIn == .seconds(86_400))
    }

    /// It goes into every send's authorization header: anything else is the endpoint failing.
    @Test(arguments: [
        #"{"access_token":"ya29 x"}"#, #"{"access_token":"ya29\nx"}"#, #"{"access_token":"ya29\u0000x"}"#,
        #"{"access_token":"ya29.é"}"#, #"{"access_token":""}"#, #"{"access_token":5}"#, #"{}"#, "not json",
        #"{"access_token":"\#(String(repeating: "a", count: 4097))"}"#,
    ])
    func aTokenThatIsNotABearerTokenIsTheEndpointFailing(_ body: String) {
        #expect {
            try Self.read(200, body)
        } throws: { error in
            guard case .transient = error as? AccessTokenError else { return false }
            return true
        }
    }

    @Test func refusalsAndFailuresAreToldApart() {
        #expect(throws: AccessTokenError.refused("Invalid JWT Signature.", invalidGrant: true)) {
            try Self.read(400, #"{"error":"invalid_grant","error_description":"Invalid JWT Signature."}"#)
        }
        #expect(throws: AccessTokenError.refused("invalid_client")) { try Self.read(401, #"{"error":"invalid_client"}"#) }
        #expect(throws: AccessTokenError.refused("HTTP 403")) { try Self.read(403, "") }
        #expect(throws: AccessTokenError.transient("HTTP 503", retryAfter: .seconds(7))) {
            try Self.read(503, "", retryAfter: .seconds(7))
        }
        #expect(throws: AccessTokenError.transient("HTTP 429", retryAfter: nil)) { try Self.read(429, "{}") }
        // A proxy wanting credentials of its own: Google never saw the request.
        #expect(throws: AccessTokenError.transient("HTTP 407", retryAfter: nil)) { try Self.read(407, "") }
    }
    /// A key Google does not know yet (created a moment ago: it takes a minute or more to be
    /// accepted) is waited for within the grace, and taken once it is accepted; past the grace the
    /// same answer is a refusal.
    @Test func aNewKeyIsWaitedForWithinTheGraceAndRefusedPastIt() async throws {
        try await FCMEmulator.withRunning(.init(retainedMessageLimit: 0), logger: workerLogger) { emulator in
            let fixture = try ServiceAccountFixture.generate(projectID: "rotated-project")
            let account = ServiceAccount(
                projectID: fixture.projectID, clientEmail: fixture.clientEmail, privateKeyPEM: fixture.privateKeyPEM,
                privateKeyID: fixture.privateKeyID)
            var configuration = DispatchConfiguration(databaseURL: "postgres://unused@127.0.0.1/unused")
            configuration.caFile = emulator.caFilePath
            let http = makeHTTPClient(configuration, tls: makeTLSConfiguration(configuration))
            let outcome: Result<Void, any Error>
            do {
                let exchange = GoogleTokenExchange(http: http, tokenURL: emulator.tokenURL, timeout: .seconds(10))
                let patient = AccessTokenCache(exchange: exchange, newKeyGrace: .seconds(60))
                let strict = AccessTokenCache(exchange: exchange, newKeyGrace: .zero)
                await #expect {
                    try await patient.token(for: account)
                } throws: { error in
                    guard case .transient(let reason, _) = error as? AccessTokenError else { return false }
                    return reason.hasPrefix("Invalid grant: account not found (a key is taken for 60 s")
                }
                await #expect(throws: AccessTokenError.refused("Invalid grant: account not found", invalidGrant: true)) {
                    try await strict.token(for: account)
                }
                emulator.registerServiceAccount(fixture.serviceAccount)
                try await Task.sleep(for: .milliseconds(1100))  // the first backoff
                #expect(try await !patient.token(for: account).isEmpty)
                outcome = .success(())
            } catch {
                outcome = .failure(error)
            }
            try await http.shutdown()
            try outcome.get()
        }
    }
}
