import FCMEmulator
import Foundation
import NIOHTTP1
import Testing

@Suite("OAuth token endpoint")
struct TokenEndpointTests {
    static let timeframeMessage =
        "Invalid JWT: Token must be a short-lived token (60 minutes) and in a reasonable timeframe. Check your iat and exp values in the JWT claim."

    @Test("a correctly signed assertion mints a Bearer access token")
    func mintsToken() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            session.emulator.registerServiceAccount(fixture.serviceAccount)
            let assertion = try Assertion.standard(for: fixture, audience: session.emulator.tokenURL).signed(with: fixture.privateKey)
            let result = try await session.exchange(assertion: assertion)
            #expect(result.status == 200)
            #expect((result.json["access_token"] as? String)?.hasPrefix("ya29.") == true)
            #expect(result.json["expires_in"] as? Int == 3600)
            #expect(result.json["token_type"] as? String == "Bearer")
            #expect(session.emulator.stats.tokenExchanges == 1)
        }
    }

    @Test("an assertion signed with another key is an invalid signature")
    func wrongKey() async throws {
        let fixture = try Fixtures.primary()
        let stranger = try Fixtures.stranger()
        try await EmulatorSession.with { session in
            session.emulator.registerServiceAccount(fixture.serviceAccount)
            let assertion = try Assertion.standard(for: fixture, audience: session.emulator.tokenURL).signed(with: stranger.privateKey)
            let result = try await session.exchange(assertion: assertion)
            #expect(result.status == 400)
            #expect(result.json["error"] as? String == "invalid_grant")
            #expect(result.json["error_description"] as? String == "Invalid JWT Signature.")
            #expect(session.emulator.stats.rejectedTokenExchanges == 1)
        }
    }

    @Test("a kid that is not the registered key id is an invalid signature")
    func wrongKeyID() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            session.emulator.registerServiceAccount(fixture.serviceAccount)
            let now = Int(Date().timeIntervalSince1970)
            let assertion = try Assertion(
                kid: "rotated-away", iss: fixture.clientEmail, aud: session.emulator.tokenURL, iat: "\(now)", exp: "\(now + 3600)"
            ).signed(with: fixture.privateKey)
            let result = try await session.exchange(assertion: assertion)
            #expect(result.status == 400)
            #expect(result.json["error_description"] as? String == "Invalid JWT Signature.")
        }
    }

    @Test(
        "iat and exp outside a short, current, whole-second window are refused",
        arguments: [
            ("lifetime of 7200 s", "0", "7200"),
            ("fractional iat", "0.5", "3600"),
            ("fractional exp", "0", "3599.25"),
            ("expired", "-7200", "-3600"),
            ("iat an hour ahead", "3600", "5400"),
            ("exp before iat", "0", "-10"),
        ]
    )
    func badTimeframe(case name: String, iatOffset: String, expOffset: String) async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            session.emulator.registerServiceAccount(fixture.serviceAccount)
            let now = Double(Int(Date().timeIntervalSince1970))
            let iat = Self.seconds(now + (Double(iatOffset) ?? 0))
            let exp = Self.seconds(now + (Double(expOffset) ?? 0))
            let assertion = try Assertion(
                kid: fixture.privateKeyID, iss: fixture.clientEmail, aud: session.emulator.tokenURL, iat: iat, exp: exp
            ).signed(with: fixture.privateKey)
            let result = try await session.exchange(assertion: assertion)
            #expect(result.status == 400, "\(name)")
            #expect(result.json["error"] as? String == "invalid_grant", "\(name)")
            #expect(result.json["error_description"] as? String == Self.timeframeMessage, "\(name)")
        }
    }

    /// Whole numbers print without a fraction, so only the fractional cases carry one.
    private static func seconds(_ value: Double) -> String {
        value.rounded() == value ? String(Int(value)) : String(value)
    }

    @Test("an unregistered issuer is account not found")
    func unknownAccount() async throws {
        let stranger = try Fixtures.stranger()
        try await EmulatorSession.with { session in
            let assertion = try Assertion.standard(for: stranger, audience: session.emulator.tokenURL).signed(with: stranger.privateKey)
            let result = try await session.exchange(assertion: assertion)
            #expect(result.status == 400)
            #expect(result.json["error"] as? String == "invalid_grant")
            #expect(result.json["error_description"] as? String == "Invalid grant: account not found")
        }
    }

    @Test("a grant type other than jwt-bearer is unsupported_grant_type")
    func wrongGrantType() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            session.emulator.registerServiceAccount(fixture.serviceAccount)
            let assertion = try Assertion.standard(for: fixture, audience: session.emulator.tokenURL).signed(with: fixture.privateKey)
            let result = try await session.exchange(assertion: assertion, grantType: "client_credentials")
            #expect(result.status == 400)
            #expect(result.json["error"] as? String == "unsupported_grant_type")
        }
    }

    @Test(
        "the scopes the Admin SDKs ask for mint a token that sends: firebase.messaging or cloud-platform among others",
        arguments: [
            "https://www.googleapis.com/auth/firebase.messaging",
            // firebase-admin (Python) asks for these; cloud-platform is what covers FCM.
            "https://www.googleapis.com/auth/cloud-platform https://www.googleapis.com/auth/datastore https://www.googleapis.com/auth/devstorage.read_write https://www.googleapis.com/auth/firebase https://www.googleapis.com/auth/identitytoolkit https://www.googleapis.com/auth/userinfo.email",
        ]
    )
    func sdkScopes(scope: String) async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            session.emulator.registerServiceAccount(fixture.serviceAccount)
            let now = Int(Date().timeIntervalSince1970)
            let assertion = try Assertion(
                kid: fixture.privateKeyID, iss: fixture.clientEmail, aud: session.emulator.tokenURL,
                iat: "\(now)", exp: "\(now + 3600)", scope: scope
            ).signed(with: fixture.privateKey)
            let token = try #require(try await session.exchange(assertion: assertion).json["access_token"] as? String)
            #expect(try await session.send(accessToken: token, body: EmulatorSession.message(token: "device-1")).status == 200)
        }
    }

    @Test("a token whose scopes do not cover FCM is minted, as Google does, and refused at send: 403 insufficient scopes")
    func scopeWithoutFCM() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            session.emulator.registerServiceAccount(fixture.serviceAccount)
            let now = Int(Date().timeIntervalSince1970)
            let assertion = try Assertion(
                kid: fixture.privateKeyID, iss: fixture.clientEmail, aud: session.emulator.tokenURL,
                iat: "\(now)", exp: "\(now + 3600)", scope: "https://www.googleapis.com/auth/userinfo.email"
            ).signed(with: fixture.privateKey)
            let token = try #require(try await session.exchange(assertion: assertion).json["access_token"] as? String)
            let result = try await session.send(accessToken: token, body: EmulatorSession.message(token: "device-1"))
            #expect(result.status == 403)
            #expect(result.rpcStatus == "PERMISSION_DENIED")
            #expect(result.errorMessage == "Request had insufficient authentication scopes.")
            #expect(result.fcmErrorCode == nil)
            #expect(session.emulator.stats.accepted == 0)
        }
    }

    @Test("an assertion without a scope is invalid_scope")
    func missingScope() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            session.emulator.registerServiceAccount(fixture.serviceAccount)
            let now = Int(Date().timeIntervalSince1970)
            let assertion = try Assertion(
                kid: fixture.privateKeyID, iss: fixture.clientEmail, aud: session.emulator.tokenURL,
                iat: "\(now)", exp: "\(now + 3600)", scope: ""
            ).signed(with: fixture.privateKey)
            let result = try await session.exchange(assertion: assertion)
            #expect(result.status == 400)
            #expect(result.json["error"] as? String == "invalid_scope")
        }
    }

    @Test(
        "Google's token audience is accepted whatever URL the assertion is posted to, as Google does, and so is the emulator's own",
        arguments: [
            "https://oauth2.googleapis.com/token", "https://www.googleapis.com/oauth2/v4/token",
            "https://accounts.google.com/o/oauth2/token", nil,
        ]
    )
    func acceptedAudience(audience: String?) async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            session.emulator.registerServiceAccount(fixture.serviceAccount)
            let assertion = try Assertion.standard(for: fixture, audience: audience ?? session.emulator.tokenURL).signed(
                with: fixture.privateKey)
            let result = try await session.exchange(assertion: assertion)
            #expect(result.status == 200)
            #expect((result.json["access_token"] as? String)?.hasPrefix("ya29.") == true)
        }
    }

    @Test("any other audience is refused")
    func wrongAudience() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            session.emulator.registerServiceAccount(fixture.serviceAccount)
            let assertion = try Assertion.standard(for: fixture, audience: "https://login.example.com/token").signed(
                with: fixture.privateKey)
            let result = try await session.exchange(assertion: assertion)
            #expect(result.status == 400)
            #expect(result.json["error"] as? String == "invalid_grant")
            #expect((result.json["error_description"] as? String)?.contains("audience") == true)
        }
    }

    @Test("padded base64 segments are malformed")
    func paddedSegments() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            session.emulator.registerServiceAccount(fixture.serviceAccount)
            let assertion = try Assertion.standard(for: fixture, audience: session.emulator.tokenURL).signed(with: fixture.privateKey)
            let segments = assertion.split(separator: ".").map(String.init)
            let padded = ([segments[0] + "=="] + segments[1...]).joined(separator: ".")
            let result = try await session.exchange(assertion: padded)
            #expect(result.status == 400)
            #expect(result.json["error"] as? String == "invalid_grant")
        }
    }

    @Test("scripted token endpoint failures come first, then tokens are minted again")
    func scriptedFailures() async throws {
        let fixture = try Fixtures.primary()
        try await EmulatorSession.with { session in
            session.emulator.registerServiceAccount(fixture.serviceAccount)
            session.emulator.failNextTokenRequests(count: 2, status: 503)
            let assertion = try Assertion.standard(for: fixture, audience: session.emulator.tokenURL).signed(with: fixture.privateKey)
            #expect(try await session.exchange(assertion: assertion).status == 503)
            #expect(try await session.exchange(assertion: assertion).status == 503)
            #expect(try await session.exchange(assertion: assertion).status == 200)
        }
    }

    @Test("a rotated key replaces the old one")
    func keyRotation() async throws {
        let fixture = try Fixtures.primary()
        let stranger = try Fixtures.stranger()
        try await EmulatorSession.with { session in
            session.emulator.registerServiceAccount(fixture.serviceAccount)
            session.emulator.registerServiceAccount(
                clientEmail: fixture.clientEmail, publicKey: stranger.privateKey.publicKey, projectID: fixture.projectID
            )
            let oldKey = try Assertion.standard(for: fixture, audience: session.emulator.tokenURL).signed(with: fixture.privateKey)
            #expect(try await session.exchange(assertion: oldKey).json["error_description"] as? String == "Invalid JWT Signature.")
            let newKey = try Assertion.standard(for: fixture, audience: session.emulator.tokenURL).signed(with: stranger.privateKey)
            #expect(try await session.exchange(assertion: newKey).status == 200)
        }
    }

    @Test("a service-account JSON file registers the public half of its key")
    func serviceAccountFile() async throws {
        let fixture = try Fixtures.primary()
        let account = try RegisteredAccount(serviceAccountJSON: Data(fixture.json().utf8))
        #expect(account.clientEmail == fixture.clientEmail)
        #expect(account.projectID == fixture.projectID)
        #expect(account.keyID == fixture.privateKeyID)
        #expect(account.publicKey.derRepresentation == fixture.privateKey.publicKey.derRepresentation)
        #expect(fixture.privateKeyPEM.hasPrefix("-----BEGIN PRIVATE KEY-----"))
        let json = try #require(
            try JSONSerialization.jsonObject(with: Data(fixture.json(tokenURI: "https://127.0.0.1:1/token").utf8)) as? [String: String])
        #expect(json["type"] == "service_account")
        #expect(json["token_uri"] == "https://127.0.0.1:1/token")
    }
}
