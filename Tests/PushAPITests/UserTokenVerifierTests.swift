import Foundation
import TestSupport
import Testing

@testable import PushAPI

@Suite("Access token claims")
struct AccessTokenClaimTests {
    let verifier: UserTokenVerifier

    init() async throws {
        verifier = try await UserTokenVerifier(.init(hmacSecret: TokenMint.secret, audience: "push"))
    }

    func verify(_ claims: [String: Any], now: Date = Date()) throws(UserTokenVerifier.Failure) -> AppUser {
        try verifier.verify(TokenMint.sign(claims), now: now)
    }

    @Test func acceptsFractionalDatesAndAnAudienceArray() throws {
        let now = Date().timeIntervalSince1970
        let user = try verify(["userId": 7, "appId": 3, "exp": now + 60.5, "nbf": now - 0.25, "aud": ["other", "push"]])
        #expect(user == AppUser(userID: 7, appID: 3))
        #expect(try verify(["sub": "8", "appId": 3, "exp": Int(now) + 60, "aud": "push"]) == AppUser(userID: 8, appID: 3))
    }

    /// A `sub` is a user id only as plain digits: `+8` and `008` are not user 8.
    @Test func aSubOfAnyOtherSpellingIsNoUser() {
        let exp = Int(Date().timeIntervalSince1970) + 60
        for sub in ["+8", "008", " 8", "8.0", "-8"] {
            #expect(throws: UserTokenVerifier.Failure.missingUser, "\(sub)") {
                try verify(["sub": sub, "appId": 3, "exp": exp, "aud": "push"])
            }
        }
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
        // A null claim is an absent one.
        #expect(throws: UserTokenVerifier.Failure.missingExpiry) { try verify(base.merging(["exp": NSNull()]) { $1 }) }
        #expect(throws: UserTokenVerifier.Failure.wrongAudience) { try verify(base.merging(["aud": NSNull()]) { $1 }) }
    }

    @Test func expiresAtExpAndIsValidFromNbf() throws {
        let at = Date(timeIntervalSince1970: 2_000_000_000)
        let claims: [String: Any] = ["userId": 7, "appId": 3, "exp": 2_000_000_060, "nbf": 2_000_000_000, "aud": "push"]
        #expect(try verify(claims, now: at) == AppUser(userID: 7, appID: 3))
        #expect(throws: UserTokenVerifier.Failure.notYetValid) { try verify(claims, now: at.addingTimeInterval(-0.5)) }
        #expect(try verify(claims, now: at.addingTimeInterval(59.5)) == AppUser(userID: 7, appID: 3))
        #expect(throws: UserTokenVerifier.Failure.expired) { try verify(claims, now: at.addingTimeInterval(60)) }
    }

    @Test func refusesTokensThatAreNotThreeUnpaddedSegments() {
        let exp = Int(Date().timeIntervalSince1970) + 60
        let good = TokenMint.sign(["userId": 7, "appId": 3, "exp": exp, "aud": "push"])
        #expect((try? verifier.verify(good)) == AppUser(userID: 7, appID: 3))
        let parts = good.split(separator: ".").map(String.init)
        for token in [
            "\(good).", "\(parts[0]).\(parts[1])", "\(parts[0])=.\(parts[1]).\(parts[2])", "\(parts[0]).\(parts[1]).\(parts[2])=",
            "e30.\(parts[1]).\(parts[2])", "..",
        ] {
            #expect(throws: UserTokenVerifier.Failure.malformed, "\(token)") { try verifier.verify(token) }
        }
    }

    /// Each segment has one spelling: unpadded base64url whose last character has no stray bits
    /// (jwt-kit's own decoder would take the others). A changed header or claims segment is
    /// signed again, so that only its spelling can be refused.
    @Test func refusesPaddingForeignCharactersAndStrayBitsInEverySegment() throws {
        let exp = Int(Date().timeIntervalSince1970) + 60
        // Three claims segments, one per length that leaves unused bits in the last character or none.
        for userID in [7, 70, 700] {
            let parts = TokenMint.sign(["userId": userID, "appId": 3, "exp": exp, "aud": "push"]).split(separator: ".").map(String.init)
            #expect(try verifier.verify(parts.joined(separator: ".")) == AppUser(userID: Int64(userID), appID: 3))
            for index in parts.indices {
                let segment = parts[index]
                var spellings = [
                    "\(segment)=", "\(segment)==", "+\(segment.dropFirst())", "/\(segment.dropFirst())",
                    "\(segment.prefix(4)) \(segment.dropFirst(5))",
                ]
                if let stray = Self.withStrayBit(segment) { spellings.append(stray) }
                for spelling in spellings {
                    var token = parts
                    token[index] = spelling
                    if index < 2 {
                        token[2] = TokenMint.base64URL(TokenMint.hmac(Data("\(token[0]).\(token[1])".utf8)))
                    }
                    #expect(throws: UserTokenVerifier.Failure.malformed, "segment \(index): \(spelling)") {
                        try verifier.verify(token.joined(separator: "."))
                    }
                }
            }
        }
    }

    /// The segment with the lowest unused bit of its last character set (the same bytes to a
    /// decoder that ignores those bits), or nil when the last character has no unused bits.
    static func withStrayBit(_ segment: String) -> String? {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        guard segment.count % 4 > 1, let last = segment.last, let value = alphabet.firstIndex(of: last) else { return nil }
        return segment.dropLast() + String(alphabet[value | 1])
    }
}
