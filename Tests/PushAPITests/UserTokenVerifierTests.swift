import Foundation
@testable import PushAPI
import Testing

@Suite("base64url segments")
struct Base64URLTests {
    @Test func decodesEveryLengthOfUnpaddedInput() {
        var random = SystemRandomNumberGenerator()
        for length in 0..<40 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &random) }
            let encoded = Data(bytes).base64EncodedString()
                .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
            #expect(Base64URL.decode(ArraySlice(encoded.utf8)) == bytes, "length \(length)")
        }
    }

    @Test(arguments: ["QQ==", "QQ=", "Q", "QR", "a+b/", "ab c", "ab.c"])
    func refusesPaddingForeignCharactersAndStrayBits(_ segment: String) {
        #expect(Base64URL.decode(ArraySlice(segment.utf8)) == nil)
    }
}

@Suite("Access token claims")
struct AccessTokenClaimTests {
    let verifier: UserTokenVerifier

    init() async throws {
        verifier = try await UserTokenVerifier(.init(hmacSecret: TokenMint.secret, audience: "push"))
    }

    func verify(_ claims: [String: Any]) throws(UserTokenVerifier.Failure) -> AppUser {
        try verifier.verify(TokenMint.sign(claims))
    }

    @Test func acceptsFractionalDatesAndAnAudienceArray() throws {
        let now = Date().timeIntervalSince1970
        let user = try verify(["userId": 7, "appId": 3, "exp": now + 60.5, "nbf": now - 0.25, "aud": ["other", "push"]])
        #expect(user == AppUser(userID: 7, appID: 3))
        #expect(try verify(["sub": "8", "appId": 3, "exp": Int(now) + 60, "aud": "push"]) == AppUser(userID: 8, appID: 3))
    }

    @Test func claimsOfTheWrongTypeMakeTheTokenMalformed() {
        let exp = Int(Date().timeIntervalSince1970) + 60
        let base: [String: Any] = ["userId": 7, "appId": 3, "exp": exp, "aud": "push"]
        for (claim, value) in [("userId", "7" as Any), ("appId", 3.5), ("exp", "tomorrow"), ("aud", [1]), ("iss", 5), ("sub", 8)] {
            var claims = base
            claims[claim] = value
            #expect(throws: UserTokenVerifier.Failure.malformed, "\(claim)") { try verify(claims) }
        }
        #expect(throws: UserTokenVerifier.Failure.expired) { try verify(base.merging(["exp": exp - 120]) { $1 }) }
        #expect(throws: UserTokenVerifier.Failure.wrongAudience) { try verify(base.merging(["aud": ["a", "b"]]) { $1 }) }
    }

    @Test func refusesTokensThatAreNotThreeUnpaddedSegments() {
        let exp = Int(Date().timeIntervalSince1970) + 60
        let good = TokenMint.sign(["userId": 7, "appId": 3, "exp": exp, "aud": "push"])
        #expect((try? verifier.verify(good)) == AppUser(userID: 7, appID: 3))
        let parts = good.split(separator: ".").map(String.init)
        for token in ["\(good).", "\(parts[0]).\(parts[1])", "\(parts[0])=.\(parts[1]).\(parts[2])", "\(parts[0]).\(parts[1]).\(parts[2])=",
                      "e30.\(parts[1]).\(parts[2])", ".."] {
            #expect(throws: UserTokenVerifier.Failure.malformed, "\(token)") { try verifier.verify(token) }
        }
    }
}
