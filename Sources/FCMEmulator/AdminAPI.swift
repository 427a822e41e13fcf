import Foundation
import Hummingbird
import NIOCore
import NIOFoundationCompat
import WireFormats

/// `/emulator/...`: the controls of ``RunningEmulator`` over HTTP, for out-of-process users (the executable,
/// shell demos). Unauthenticated: the emulator is a loopback test tool.
///
/// - `POST /emulator/service-accounts` `{"client_email", "project_id", "public_key" | "private_key", "private_key_id"?}`
/// - `POST /emulator/script` `{"token" | "token_prefix", "outcome", "times"?, "retry_after"?, "delay_ms"?}`
/// - `POST /emulator/token-failures` `{"count", "status"?}`
/// - `POST /emulator/revoke-access-tokens`
/// - `POST /emulator/latency` `{"profile": "50%:30ms,…" | null}`
/// - `POST /emulator/outage` `{"seconds"}`: 202, then the emulator (this API too) is unreachable for that long
/// - `GET /emulator/stats[?devices=false]`
/// - `GET /emulator/messages[?token=…]`
/// - `POST /emulator/reset`
struct AdminAPI: Sendable {
    let core: EmulatorCore

    private struct RegistrationAnswer: Encodable {
        var client_email: String
        var project_id: String
    }

    private struct AdminError: Encodable {
        var error: String
    }

    private static let bodyLimit = 256 * 1024
    private static let longestOutageSeconds = 86_400.0
    /// Between the 202 and the outage, so that the answer gets out before its connection is cut.
    private static let outageGrace = TimeAmount.milliseconds(100)

    func register(on router: Router<BasicRequestContext>) {
        let group = router.group("emulator")
        group.post("service-accounts") { request, _ in
            let body = try await request.body.collect(upTo: Self.bodyLimit)
            do throws(RegisteredAccountError) {
                let account = try RegisteredAccount(serviceAccountJSON: Data(buffer: body))
                core.registry.register(account)
                return GoogleResponses.json(
                    .created,
                    encoding: RegistrationAnswer(client_email: account.clientEmail, project_id: account.projectID)
                ).response
            } catch {
                return Self.badRequest(error.description)
            }
        }
        group.post("script") { request, _ in
            let body = try await request.body.collect(upTo: Self.bodyLimit)
            guard
                let script = JSONParser.object(
                    Data(buffer: body), strings: ["token", "token_prefix", "outcome"],
                    integers: ["times", "retry_after", "delay_ms"]),
                let outcomeName = script["outcome"]?.string
            else {
                return Self.badRequest("expected {\"token\" or \"token_prefix\", \"outcome\", \"times\"?, \"retry_after\"?, \"delay_ms\"?}")
            }
            guard
                let outcome = Outcome(
                    name: outcomeName,
                    times: script["times"]?.integer.map { Int($0) },
                    retryAfter: script["retry_after"]?.integer.map { Int($0) },
                    delay: script["delay_ms"]?.integer.map { .milliseconds($0) }
                )
            else {
                return Self.badRequest(
                    "unknown outcome \"\(outcomeName)\"; use success, unregistered, invalid_token, sender_id_mismatch, third_party_auth_error, unavailable, internal, quota_exceeded, rate_limit_exceeded, slow, unauthenticated or bare_<status> (e.g. bare_400)"
                )
            }
            switch (script["token"]?.string, script["token_prefix"]?.string) {
            case (let token?, nil): core.ledger.script(token: token, outcome: outcome)
            case (nil, let prefix?): core.ledger.addPrefixRule(PrefixRule(prefix: prefix, outcome: outcome))
            default: return Self.badRequest("give exactly one of token and token_prefix")
            }
            return Response(status: .noContent)
        }
        group.post("token-failures") { request, _ in
            let body = try await request.body.collect(upTo: Self.bodyLimit)
            guard let failures = JSONParser.object(Data(buffer: body), integers: ["count", "status"]),
                let count = failures["count"]?.integer
            else {
                return Self.badRequest("expected {\"count\", \"status\"?}")
            }
            core.tokenFaults.failNext(
                count: Int(count), status: HTTPResponse.Status(code: failures["status"]?.integer.map { Int($0) } ?? 503))
            return Response(status: .noContent)
        }
        group.post("revoke-access-tokens") { _, _ in
            core.registry.revokeAccessTokens()
            return Response(status: .noContent)
        }
        group.post("latency") { request, _ in
            let body = try await request.body.collect(upTo: Self.bodyLimit)
            // `profile` must be there, null switching the latency off: a misspelt key is not taken for null.
            guard let latency = JSONParser.object(Data(buffer: body), strings: ["profile"]), let profile = latency["profile"] else {
                return Self.badRequest("expected {\"profile\": \"50%:30ms,39%:60ms,10%:150ms,1%:2s\"} or {\"profile\": null}")
            }
            guard let text = profile.string else {
                core.latency.set(nil)
                return Response(status: .noContent)
            }
            do throws(LatencyProfileError) {
                core.latency.set(try LatencyProfile(parsing: text))
            } catch {
                return Self.badRequest(error.description)
            }
            return Response(status: .noContent)
        }
        group.post("outage") { request, _ in
            let body = try await request.body.collect(upTo: Self.bodyLimit)
            guard let seconds = JSONParser.object(Data(buffer: body), numbers: ["seconds"])?["seconds"]?.seconds,
                (0...Self.longestOutageSeconds).contains(seconds)
            else {
                return Self.badRequest("expected {\"seconds\"} with seconds from 0 to \(Int(Self.longestOutageSeconds))")
            }
            // A timer, not a task: nothing awaits the outage, and the request ends with its answer.
            NIOSingletons.posixEventLoopGroup.any().scheduleTask(in: Self.outageGrace) {
                core.outage.begin(for: .seconds(seconds))
            }
            return Response(status: .accepted)
        }
        group.get("stats") { request, _ in
            let includingDevices = request.uri.queryParameters.get("devices") != "false"
            return GoogleResponses.json(.ok, encoding: core.ledger.stats(includingDevices: includingDevices)).response
        }
        group.get("messages") { request, _ in
            if let token = request.uri.queryParameters.get("token") {
                guard let message = core.ledger.lastAcceptedMessage(for: token) else {
                    return GoogleResponses.json(.notFound, encoding: AdminError(error: "no retained accepted message for that token"))
                        .response
                }
                return GoogleResponses.json(.ok, encoding: message).response
            }
            return GoogleResponses.json(.ok, encoding: core.ledger.recentAcceptedMessages()).response
        }
        group.post("reset") { _, _ in
            core.reset()
            return Response(status: .noContent)
        }
    }

    private static func badRequest(_ reason: String) -> Response {
        GoogleResponses.json(.badRequest, encoding: AdminError(error: reason)).response
    }
}
