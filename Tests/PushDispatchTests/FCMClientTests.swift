import DeviceRegistry
import FCMEmulator
import Synchronization
import Testing

@testable import PushDispatch

/// The sends' client against the emulator over real HTTP/2 + TLS: batches on pooled
/// connections, answers in order, and the connection keeps flowing past its first windows.
@Suite("FCM client over HTTP/2 + TLS")
struct FCMClientTests {
    private static func withClient(concurrency: Int, _ body: (FCMClient, RunningEmulator, String) async throws -> Void) async throws {
        try await FCMEmulator.withRunning(.init(retainedMessageLimit: 0), logger: workerLogger) { emulator in
            let account = try ServiceAccountFixture.generate(projectID: "client-project")
            emulator.registerServiceAccount(account.serviceAccount)
            var configuration = DispatchConfiguration(databaseURL: "postgres://unused@127.0.0.1/unused")
            configuration.fcmBaseURL = emulator.baseURL
            configuration.googleTokenURL = emulator.tokenURL
            configuration.caFile = emulator.caFilePath
            configuration.concurrency = concurrency
            let tls = makeTLSConfiguration(configuration)
            let http = makeHTTPClient(configuration, tls: tls)
            let fcm = try makeFCMClient(configuration, tls: tls)
            // Both clients are closed whatever the body does, then its error (if any) is thrown.
            let outcome: Result<Void, any Error>
            do {
                let exchange = GoogleTokenExchange(http: http, tokenURL: configuration.googleTokenURL, timeout: .seconds(10))
                let grant = try await exchange.grant(
                    for: ServiceAccount(
                        projectID: account.projectID, clientEmail: account.clientEmail, privateKeyPEM: account.privateKeyPEM,
                        privateKeyID: account.privateKeyID))
                try await body(fcm, emulator, grant.accessToken)
                outcome = .success(())
            } catch {
                outcome = .failure(error)
            }
            await fcm.close()
            try await http.shutdown()
            try outcome.get()
        }
    }

    private static func sends(_ count: Int, prefix: String) -> [FCMClient.Send] {
        let message = PreparedMessage(messageJSON: #"{"data":{"k":"v"}}"#, validateOnly: false)
        return (0..<count).map { FCMClient.Send(message: message, target: "\(prefix)-\($0)", type: .fcm) }
    }

    @Test func thousandsOfAnswersOnOneConnectionInOrder() async throws {
        try await Self.withClient(concurrency: 64) { fcm, emulator, accessToken in
            emulator.script(tokenPrefix: "gone-", .unregistered)
            // 2,500 answers of ~60 bytes: several times the 64 KiB window the server starts with. The
            // emulator ends each answer on its DATA frame, as Google's servers do: a client that writes
            // a WINDOW_UPDATE before taking in the frame that crossed its credit threshold sees the
            // stream's close first and loses that answer.
            for round in 0..<5 {
                var batch = Self.sends(500, prefix: "round\(round)")
                batch[7] = FCMClient.Send(message: batch[7].message, target: "gone-\(round)", type: .fcm)
                let answers = await fcm.send(batch, projectID: "client-project", accessToken: accessToken)
                #expect(answers.count == 500)
                for (index, answer) in answers.enumerated() {
                    if index == 7 {
                        #expect(
                            answer.outcome
                                == .deadToken(errorCode: .unregistered, message: "Requested entity was not found.", reason: .unregistered))
                    } else if case .sent(let id) = answer.outcome {
                        #expect(!id.isEmpty && answer.elapsed != nil)
                    } else {
                        Issue.record("send \(index) of round \(round): \(answer.outcome)")
                    }
                }
            }
            #expect(emulator.stats.accepted == 2495)
            #expect(emulator.stats(for: "round4-499").accepted == 1)
        }
    }

    @Test func concurrentBatchesSpreadOverConnectionsAndAllArrive() async throws {
        try await Self.withClient(concurrency: 300) { fcm, emulator, accessToken in
            let answers = await withTaskGroup(of: [FCMClient.Answer].self) { group in
                for batch in 0..<6 {
                    group.addTask {
                        await fcm.send(Self.sends(150, prefix: "c\(batch)"), projectID: "client-project", accessToken: accessToken)
                    }
                }
                return await group.reduce(into: []) { $0 += $1 }
            }
            #expect(answers.count == 900)
            #expect(answers.allSatisfy { if case .sent = $0.outcome { true } else { false } })
            #expect(emulator.stats.accepted == 900)
        }
    }

    @Test func aWrongAccessTokenIsUnauthenticatedAndNothingIsSent() async throws {
        try await Self.withClient(concurrency: 8) { fcm, emulator, _ in
            let answers = await fcm.send(Self.sends(3, prefix: "x"), projectID: "client-project", accessToken: "ya29.forged")
            #expect(answers.map(\.outcome) == Array(repeating: .unauthenticated, count: 3))
            #expect(emulator.stats.accepted == 0)
        }
    }

    @Test func nothingListeningIsUnreachableAndNoSendReachedFCM() async throws {
        var configuration = DispatchConfiguration(databaseURL: "postgres://unused@127.0.0.1/unused")
        configuration.fcmBaseURL = "https://127.0.0.1:1"
        let fcm = try makeFCMClient(configuration, tls: makeTLSConfiguration(configuration))
        let answers = await fcm.send(Self.sends(2, prefix: "x"), projectID: "p", accessToken: "t")
        await fcm.close()
        for answer in answers {
            guard case .notSent(let reason, unreachable: true) = answer else {
                Issue.record("\(answer)")
                continue
            }
            #expect(reason.hasPrefix("connect: 127.0.0.1:1: "))
        }
        #expect(answers.count == 2)
    }
}

extension FCMClient {
    /// `send` gathering the answers, in order.
    func send(_ sends: [Send], projectID: String, accessToken: String) async -> [Answer] {
        let answers = Mutex([Answer?](repeating: nil, count: sends.count))
        await send(sends, projectID: projectID, accessToken: accessToken) { index, answer in answers.withLock { $0[index] = answer } }
        return answers.withLock { $0.map { $0! } }
    }
}

extension FCMClient.Answer {
    /// FCM's answer, nil when the send never reached it.
    var outcome: SendOutcome? {
        if case .answered(let outcome, _) = self { outcome } else { nil }
    }

    var elapsed: Duration? {
        if case .answered(_, let elapsed) = self { elapsed } else { nil }
    }
}
