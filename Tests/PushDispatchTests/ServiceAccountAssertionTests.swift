import DeviceRegistry
import Foundation
import JWTKit
import TestSupport
import Testing

@testable import PushDispatch

/// The assertion as Google's token endpoint reads it: RS256 with the account's key and key id,
/// its five claims, whole seconds, an hour long.
@Suite struct ServiceAccountAssertionTests {
    @Test func itCarriesTheGrantsClaimsInWholeSecondsSignedByTheAccountsKey() async throws {
        let file = try ServiceAccountFile.make()
        defer { try? FileManager.default.removeItem(atPath: file.path) }
        let account = ServiceAccount(
            projectID: file.projectID, clientEmail: file.clientEmail, privateKeyPEM: file.privateKeyPEM,
            privateKeyID: file.privateKeyID)
        let now = Date(timeIntervalSince1970: 1_795_000_000.75)
        let assertion = try await ServiceAccountAssertion(account).signed(audience: "https://oauth2.googleapis.com/token", now: now)

        let segments = assertion.split(separator: ".").map(String.init)
        try #require(segments.count == 3)
        let header = try segmentJSON(segments[0])
        #expect(header["alg"] as? String == "RS256" && header["typ"] as? String == "JWT" && header["kid"] as? String == file.privateKeyID)
        let claimsText = try segmentText(segments[1])
        let claims = try #require(try JSONSerialization.jsonObject(with: Data(claimsText.utf8)) as? [String: Any])
        #expect(claims["iss"] as? String == file.clientEmail)
        #expect(claims["scope"] as? String == "https://www.googleapis.com/auth/firebase.messaging")
        #expect(claims["aud"] as? String == "https://oauth2.googleapis.com/token", "one audience is a string, not an array")
        #expect(claims["iat"] as? Int == 1_794_999_990 && claims["exp"] as? Int == 1_795_003_590)
        for integer in [#""iat":1794999990[,}]"#, #""exp":1795003590[,}]"#] {
            #expect(claimsText.range(of: integer, options: .regularExpression) != nil, "iat and exp are written as integers: \(claimsText)")
        }

        let publicKey = try Insecure.RSA.PrivateKey(pem: file.privateKeyPEM).publicKey
        let verifier = await JWTKeyCollection().add(rsa: publicKey, digestAlgorithm: .sha256, kid: JWKIdentifier(string: file.privateKeyID))
        let verified = try await verifier.verify(assertion, as: ServiceAccountAssertion.Claims.self)
        #expect(verified.iss.value == file.clientEmail)
    }

    @Test func aKeyThatIsNotRSAInPEMIsRefused() {
        let account = ServiceAccount(
            projectID: "p", clientEmail: "e@p.iam.gserviceaccount.com", privateKeyPEM: "not a key", privateKeyID: nil)
        #expect(throws: AccessTokenError.self) { try ServiceAccountAssertion(account) }
    }
}

private func segmentText(_ segment: String) throws -> String {
    var base64 = segment.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
    base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
    return String(decoding: try #require(Data(base64Encoded: base64)), as: UTF8.self)
}

private func segmentJSON(_ segment: String) throws -> [String: Any] {
    try #require(try JSONSerialization.jsonObject(with: Data(try segmentText(segment).utf8)) as? [String: Any])
}
