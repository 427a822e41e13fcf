import DeviceRegistry
import Foundation
import ServiceSupport
import Testing

@Suite("Registration input rules")
struct ValidationTests {
    @Test func acceptsAValidRegistration() throws {
        let valid = try DeviceRegistration(token: String(repeating: "a", count: 500), platform: "web", deviceID: "d", tokenType: "fid")
        #expect(valid.platform == .web && valid.tokenType == .fid)
        #expect(try DeviceRegistration(token: "t", platform: "android", deviceID: nil, tokenType: nil).tokenType == .fcm)
    }

    @Test(arguments: [
        (nil as String?, "ios" as String?, nil as String?, nil as String?, "token is required"),
        ("", "ios", nil, nil, "token must be 1 to 500 characters"),
        (String(repeating: "a", count: 501), "ios", nil, nil, "token must be 1 to 500 characters"),
        ("has space", "ios", nil, nil, "token must not contain whitespace or control characters"),
        ("tab\there", "ios", nil, nil, "token must not contain whitespace or control characters"),
        ("nul\u{0}", "ios", nil, nil, "token must not contain whitespace or control characters"),
        ("zero\u{200B}width", "ios", nil, nil, "token must not contain whitespace or control characters"),
        ("tok", nil, nil, nil, "platform is required"),
        ("tok", "windows", nil, nil, "platform must be one of ios, android, web"),
        ("tok", "IOS", nil, nil, "platform must be one of ios, android, web"),
        ("tok", "ios", "", nil, "deviceId must be 1 to 200 characters"),
        ("tok", "ios", "bad\nid", nil, "deviceId must not contain control, format or line separator characters"),
        ("tok", "ios", "bad\u{2028}id", nil, "deviceId must not contain control, format or line separator characters"),
        ("tok", "ios", "bad\u{200B}id", nil, "deviceId must not contain control, format or line separator characters"),
        ("tok", "ios", nil, "apns", "tokenType must be one of fcm, fid"),
    ])
    func refusesInvalidInput(token: String?, platform: String?, deviceID: String?, tokenType: String?, message: String) {
        #expect(throws: DeviceValidationError.self) {
            try DeviceRegistration(token: token, platform: platform, deviceID: deviceID, tokenType: tokenType)
        }
        do {
            _ = try DeviceRegistration(token: token, platform: platform, deviceID: deviceID, tokenType: tokenType)
        } catch {
            #expect(error.description == message)
        }
    }
}

@Suite("DATABASE_URL")
struct DatabaseConfigurationTests {
    @Test func parsesHostPortDatabaseAndPercentEncodedCredentials() throws {
        let configuration = try DatabaseConfiguration.parse("postgres://us%40er:p%3Ass@db.example:6543/push?sslmode=disable")
        #expect(configuration.host == "db.example")
        #expect(configuration.port == 6543)
        #expect(configuration.username == "us@er")
        #expect(configuration.password == "p:ss")
        #expect(configuration.database == "push")
    }

    @Test func unixSocketDirectoryViaHostParameter() throws {
        let configuration = try DatabaseConfiguration.parse("postgresql://push@/push?host=/run/postgresql")
        #expect(configuration.unixSocketPath == "/run/postgresql/.s.PGSQL.5432")
    }

    @Test(arguments: [
        "mysql://u@h/db", "postgres://h/db", "postgres://u@h/db?sslmode=sometimes", "not a url", "postgres://u@h/db?pool_max=0",
    ])
    func refusesUnusableURLs(url: String) {
        #expect(throws: DatabaseURLError.self) { try DatabaseConfiguration.parse(url) }
    }

    @Test func poolerParameterSaysWhetherSessionsLast() throws {
        #expect(try DatabaseConfiguration.pooler("postgres://u@h/db") == .session)
        #expect(try DatabaseConfiguration.pooler("postgres://u@h:6432/db?pooler=transaction&pool_max=4") == .transaction)
        #expect(try DatabaseConfiguration.pooler("postgres://u@h/db?pooler=session") == .session)
        let refusal = #expect(throws: DatabaseURLError.self) { try DatabaseConfiguration.pooler("postgres://u@h/db?pooler=statement") }
        #expect(refusal?.description == "DATABASE_URL: pooler 'statement' is not one of session, transaction")
        #expect(throws: DatabaseURLError.self) { try DatabaseConfiguration.parse("postgres://u@h/db?pooler=") }
    }

    @Test func errorsNeverRepeatThePassword() {
        do {
            _ = try DatabaseConfiguration.parse("postgres://u:topsecret@h/db?sslmode=bogus")
            Issue.record("expected an error")
        } catch {
            #expect(!"\(error)".contains("topsecret"))
        }
    }
}
