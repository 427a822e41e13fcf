import Crypto
import DeviceRegistry
import Foundation
import Hummingbird
import HummingbirdTesting
import PushAPI
import ServiceSupport
import TestSupport
import Testing
import _CryptoExtras

@Suite("Access tokens")
struct AuthenticationTests {
    func expectUnauthenticated(_ response: TestResponse, _ message: String, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(response.status == .unauthorized, sourceLocation: sourceLocation)
        #expect(response.json["code"] as? String == "UNAUTHENTICATED", sourceLocation: sourceLocation)
        #expect(response.json["status"] as? String == "UNAUTHORIZED", sourceLocation: sourceLocation)
        #expect(response.json["message"] as? String == message, sourceLocation: sourceLocation)
    }

    @Test func missingForgedExpiredAndMalformedTokensAre401AndChangeNothing() async throws {
        let fixture = try await APIFixture.make()
        let app = fixture.appID
        try await fixture.test { client in
            let body = #"{"token":"tok-401","platform":"ios"}"#
            expectUnauthenticated(
                try await client.send(.post, "/push/devices", token: nil, json: body),
                "an access token is required (Authorization: Bearer, or the accessToken cookie)")
            expectUnauthenticated(
                try await client.send(.post, "/push/devices", token: "not-a-jwt", json: body),
                "the access token is not a well-formed JWT")
            expectUnauthenticated(
                try await client.send(
                    .post, "/push/devices",
                    token: TokenMint.sign(TokenMint.claims(appID: app), with: .hmac("another-secret-that-is-32-bytes-long!!")), json: body),
                "the access token's signature is invalid")
            expectUnauthenticated(
                try await client.send(
                    .post, "/push/devices", token: TokenMint.sign(TokenMint.claims(appID: app, expiresIn: -5)), json: body),
                "the access token has expired")
            expectUnauthenticated(
                try await client.send(
                    .post, "/push/devices", token: TokenMint.sign(TokenMint.claims(appID: app, expiresIn: nil)), json: body),
                "the access token has no exp claim")
            expectUnauthenticated(
                try await client.send(
                    .post, "/push/devices",
                    token: TokenMint.sign(TokenMint.claims(appID: app, extra: ["nbf": Int(Date().timeIntervalSince1970) + 300])), json: body
                ),
                "the access token is not valid yet (nbf)")
            expectUnauthenticated(
                try await client.send(.post, "/push/devices", token: TokenMint.sign(TokenMint.claims(appID: app), with: .none), json: body),
                "the access token's algorithm none is not accepted")
            expectUnauthenticated(
                try await client.send(.post, "/push/devices", token: TokenMint.sign(TokenMint.claims(userID: nil, appID: app)), json: body),
                "the access token has no positive integer userId (or decimal sub) claim")
            for user: Int64 in [0, -1] {
                expectUnauthenticated(
                    try await client.send(
                        .post, "/push/devices", token: TokenMint.sign(TokenMint.claims(userID: user, appID: app)), json: body),
                    "the access token has no positive integer userId (or decimal sub) claim")
            }
            expectUnauthenticated(
                try await client.send(.post, "/push/devices", token: TokenMint.sign(TokenMint.claims(appID: nil)), json: body),
                "the access token has no integer appId claim")
            // A tampered payload with the original signature.
            let good = fixture.token(user: 1).split(separator: ".")
            let evil = TokenMint.base64URL(try JSONSerialization.data(withJSONObject: TokenMint.claims(userID: 2, appID: app)))
            expectUnauthenticated(
                try await client.send(.post, "/push/devices", token: "\(good[0]).\(evil).\(good[2])", json: body),
                "the access token's signature is invalid")
            let wrongScheme = try await client.execute(uri: "/push/devices", method: .get, headers: [.authorization: "Basic dXNlcjpwYXNz"])
            #expect(wrongScheme.status == .unauthorized)
            #expect(wrongScheme.headers[.wwwAuthenticate] == "Bearer")
        }
        let rows = try await fixture.database.withClient { client in
            var n = 0
            for try await value in try await client.query("SELECT count(*)::int FROM push_devices").decode(Int.self) { n = value }
            return n
        }
        #expect(rows == 0)
    }

    /// A logout made offline arrives later with the access token the app had then: DELETE takes
    /// a token expired within LOGOUT_TOKEN_GRACE_SECONDS (a week by default), signed as always;
    /// no other request does, and no older token.
    @Test func aLogoutIsTakenWithATokenExpiredWithinTheGraceAndNothingElseIs() async throws {
        let fixture = try await APIFixture.make()
        let app = fixture.appID
        try await fixture.test { client in
            let registered = try await client.register(token: "tok-offline-logout", as: fixture.token(user: 5))
            let id = try #require(registered.json["id"] as? Int)
            let anHourAgo = TokenMint.sign(TokenMint.claims(userID: 5, appID: app, expiresIn: -3600))
            expectUnauthenticated(try await client.send(.get, "/push/devices", token: anHourAgo), "the access token has expired")
            expectUnauthenticated(
                try await client.register(token: "tok-offline-other", as: anHourAgo), "the access token has expired")
            let eightDaysAgo = TokenMint.sign(TokenMint.claims(userID: 5, appID: app, expiresIn: -8 * 86_400))
            expectUnauthenticated(
                try await client.send(.delete, "/push/devices/\(id)", token: eightDaysAgo), "the access token has expired")
            let forged = TokenMint.sign(
                TokenMint.claims(userID: 5, appID: app, expiresIn: -3600), with: .hmac("another-secret-that-is-32-bytes-long!!"))
            expectUnauthenticated(
                try await client.send(.delete, "/push/devices/\(id)", token: forged), "the access token's signature is invalid")
            #expect(try await fixture.database.text("SELECT is_active::text FROM push_devices WHERE id = \(id)") == "true")
            #expect(try await client.send(.delete, "/push/devices/\(id)", token: anHourAgo).status == .noContent)
            #expect(try await fixture.database.text("SELECT deactivation_reason FROM push_devices WHERE id = \(id)") == "logout")
        }
        // LOGOUT_TOKEN_GRACE_SECONDS=0: an expired token signs nothing.
        try await fixture.test(jwt: .init(hmacSecret: TokenMint.secret, logoutGrace: .zero)) { client in
            let registered = try await client.register(token: "tok-no-grace", as: fixture.token(user: 6))
            let id = try #require(registered.json["id"] as? Int)
            let expired = TokenMint.sign(TokenMint.claims(userID: 6, appID: app, expiresIn: -5))
            expectUnauthenticated(try await client.send(.delete, "/push/devices/\(id)", token: expired), "the access token has expired")
        }
    }

    @Test func theLogoutGraceIsAWeekUnlessSetAndRefusedOutOfRange() throws {
        let required = ["DATABASE_URL": "postgres://localhost/push", "JWT_SECRET": TokenMint.secret]
        #expect(try APIConfiguration.fromEnvironment(required).jwt.logoutGrace == .seconds(604_800))
        #expect(try APIConfiguration.fromEnvironment(required.merging(["LOGOUT_TOKEN_GRACE_SECONDS": "0"]) { $1 }).jwt.logoutGrace == .zero)
        for value in ["-1", "31536001", "a week"] {
            #expect(throws: ConfigurationError.self, "\(value)") {
                try APIConfiguration.fromEnvironment(required.merging(["LOGOUT_TOKEN_GRACE_SECONDS": value]) { $1 })
            }
        }
    }

    @Test func cookieAndDecimalSubAreAccepted() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test { client in
            // The scheme is case-insensitive; blanks around the token are not part of it.
            for header in ["bearer \(fixture.token(user: 5))", "BEARER  \t\(fixture.token(user: 5)) \t"] {
                let response = try await client.execute(uri: "/push/devices", method: .get, headers: [.authorization: header])
                #expect(response.status == .ok, "\(header)")
            }
            for header in ["Bearer", "Bearer   ", "Bearer \t ", "Bearerx \(fixture.token(user: 5))"] {
                let response = try await client.execute(uri: "/push/devices", method: .get, headers: [.authorization: header])
                #expect(response.status == .unauthorized, "\(header)")
            }
            let viaCookie = try await client.execute(
                uri: "/push/devices", method: .get, headers: [.cookie: "theme=dark; accessToken=\(fixture.token(user: 5))"])
            #expect(viaCookie.status == .ok)
            let sub = TokenMint.sign(TokenMint.claims(userID: nil, appID: fixture.appID, extra: ["sub": "77"]))
            let created = try await client.register(token: "sub-token", as: sub)
            #expect(created.status == .created)
            let listed = try await client.send(.get, "/push/devices", token: fixture.token(user: 77))
            #expect((listed.json["devices"] as? [[String: Any]])?.count == 1)
        }
    }

    @Test func unknownAppIs403() async throws {
        let fixture = try await APIFixture.make()
        try await fixture.test { client in
            let response = try await client.register(token: "tok", as: TokenMint.sign(TokenMint.claims(appID: fixture.appID + 100)))
            #expect(response.status == .forbidden)
            #expect(response.json["code"] as? String == "FORBIDDEN")
        }
    }

    @Test func rs256KeyRefusesHS256SignedWithThePublicKey() async throws {
        let fixture = try await APIFixture.make()
        let rsa = try _RSA.Signing.PrivateKey(keySize: .bits2048)
        let publicPEM = rsa.publicKey.pemRepresentation
        try await fixture.test(jwt: .init(publicKeyPEM: publicPEM)) { client in
            let good = TokenMint.sign(TokenMint.claims(appID: fixture.appID), with: .rsa(rsa))
            #expect(try await client.send(.get, "/push/devices", token: good).status == .ok)
            // The classic confusion attack: HS256 keyed with the RSA public key's PEM.
            let confused = TokenMint.sign(TokenMint.claims(appID: fixture.appID), with: .hmac(publicPEM))
            expectUnauthenticated(
                try await client.send(.get, "/push/devices", token: confused),
                "the access token's algorithm HS256 is not accepted")
            let otherKey = try _RSA.Signing.PrivateKey(keySize: .bits2048)
            expectUnauthenticated(
                try await client.send(
                    .get, "/push/devices", token: TokenMint.sign(TokenMint.claims(appID: fixture.appID), with: .rsa(otherKey))),
                "the access token's signature is invalid")
        }
    }

    @Test func es256KeyAndIssuerAudienceChecks() async throws {
        let fixture = try await APIFixture.make()
        let ec = P256.Signing.PrivateKey()
        let jwt = UserTokenVerifier.Configuration(
            publicKeyPEM: ec.publicKey.pemRepresentation, issuer: "https://auth.example", audience: "push")
        try await fixture.test(jwt: jwt) { client in
            let good = TokenMint.sign(
                TokenMint.claims(appID: fixture.appID, extra: ["iss": "https://auth.example", "aud": ["push", "other"]]), with: .ec(ec))
            #expect(try await client.send(.get, "/push/devices", token: good).status == .ok)
            let wrongIssuer = TokenMint.sign(
                TokenMint.claims(appID: fixture.appID, extra: ["iss": "https://evil.example", "aud": "push"]), with: .ec(ec))
            expectUnauthenticated(
                try await client.send(.get, "/push/devices", token: wrongIssuer), "the access token's issuer is not accepted")
            let wrongAudience = TokenMint.sign(
                TokenMint.claims(appID: fixture.appID, extra: ["iss": "https://auth.example", "aud": "billing"]), with: .ec(ec))
            expectUnauthenticated(
                try await client.send(.get, "/push/devices", token: wrongAudience), "the access token's audience is not accepted")
            let hs = TokenMint.sign(TokenMint.claims(appID: fixture.appID, extra: ["iss": "https://auth.example", "aud": "push"]))
            expectUnauthenticated(
                try await client.send(.get, "/push/devices", token: hs), "the access token's algorithm HS256 is not accepted")
        }
    }

    @Test func configurationErrorsAreClear() async throws {
        await #expect(throws: JWTConfigurationError.noKey) { try await UserTokenVerifier(.init()) }
        await #expect(throws: JWTConfigurationError.secretTooShort(bytes: 5)) { try await UserTokenVerifier(.init(hmacSecret: "short")) }
        await #expect(throws: JWTConfigurationError.unsupportedPublicKey(path: "k.pem")) {
            try await UserTokenVerifier(
                .init(publicKeyPEM: "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----", publicKeyPath: "k.pem"))
        }
        #expect(throws: ConfigurationError.missing("DATABASE_URL")) { try APIConfiguration.fromEnvironment([:]) }
        #expect(throws: ConfigurationError.invalid("API_PORT", "'http' is not an integer in 0...65535")) {
            try APIConfiguration.fromEnvironment(["DATABASE_URL": "postgres://u@h/d", "API_PORT": "http"])
        }
    }
}
