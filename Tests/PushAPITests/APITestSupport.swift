import DeviceRegistry
import Foundation
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import PushAPI
import TestSupport

let apiLogger: Logger = {
    var logger = Logger(label: "push-api-tests")
    logger.logLevel = .warning
    return logger
}()

/// A push-api on a fresh database with one app (`wowa`), built by the same function production uses.
struct APIFixture {
    let database: TestDatabase
    let appID: Int64

    static func make() async throws -> APIFixture {
        let database = try await TestPostgres.shared.makeDatabase()
        let appID = try await database.withClient { client in
            try await AppDirectory(client: client, logger: apiLogger).add(code: "wowa", name: "Wowa", serviceAccount: nil).id
        }
        return APIFixture(database: database, appID: appID)
    }

    func configuration(jwt: UserTokenVerifier.Configuration = .init(hmacSecret: TokenMint.secret), adminToken: String? = nil)
        -> APIConfiguration
    {
        APIConfiguration(databaseURL: database.url, host: "127.0.0.1", port: 0, jwt: jwt, adminToken: adminToken)
    }

    func test<T>(
        _ framework: TestingSetup = .router, jwt: UserTokenVerifier.Configuration = .init(hmacSecret: TokenMint.secret),
        adminToken: String? = nil, logger: Logger = apiLogger,
        _ body: @Sendable (any TestClientProtocol) async throws -> T
    ) async throws -> T {
        let app = try await buildApplication(configuration(jwt: jwt, adminToken: adminToken), logger: logger)
        return try await app.test(framework, body)
    }

    func token(user: Int64 = 42) -> String {
        TokenMint.sign(TokenMint.claims(userID: user, appID: appID))
    }
}

extension TestClientProtocol {
    /// Sends a JSON request with the app user's bearer token.
    func send(
        _ method: HTTPRequest.Method, _ uri: String, token: String?, json: String? = nil,
        contentType: String = "application/json"
    ) async throws -> TestResponse {
        var headers: HTTPFields = [:]
        if let token { headers[.authorization] = "Bearer \(token)" }
        if json != nil { headers[.contentType] = contentType }
        return try await execute(uri: uri, method: method, headers: headers, body: json.map { ByteBuffer(string: $0) })
    }

    func register(token: String, as bearer: String, platform: String = "ios", deviceID: String? = nil) async throws -> TestResponse {
        var body: [String: String] = ["token": token, "platform": platform]
        if let deviceID { body["deviceId"] = deviceID }
        let json = String(decoding: try JSONSerialization.data(withJSONObject: body), as: UTF8.self)
        return try await send(.post, "/push/devices", token: bearer, json: json)
    }
}

extension TestResponse {
    var json: [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(buffer: body))) as? [String: Any] ?? [:]
    }
    var text: String { String(buffer: body) }
}
