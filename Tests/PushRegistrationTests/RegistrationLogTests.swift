import Testing

@testable import PushRegistration

@Suite("Registration log")
struct RegistrationLogTests {
    @Test func anFCMTokenShowsItsFirstSixAndLastFourCharacters() {
        let token = "dGhpcyBpcyBhbiBGQ00gdG9rZW4:APA91bH-" + String(repeating: "x", count: 100) + "Zk3q"
        #expect(masked(token) == "dGhpcy…Zk3q (\(token.count) chars)")
    }

    @Test func aShortTokenNeverShowsMoreThanHalf() {
        #expect(masked("abcdefgh") == "ab…gh (8 chars)")
        #expect(masked("abc") == "… (3 chars)")
        #expect(masked("") == "… (0 chars)")
    }
}
