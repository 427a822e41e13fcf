import DeviceRegistry
import FCMEmulator
import Foundation
import PostgresNIO
import TestSupport
import Testing

@testable import PushDispatch

@Suite("push-worker against the FCM emulator")
struct DispatchTests {
    @Test func sendsToActiveDevicesOnlyAndLogsEveryDelivery() async throws {
        try await WorkerFixture.with { fixture in
            let ids = try await fixture.register(["tok-alice-phone", "tok-alice-tablet", "tok-bob", "tok-carol-old"], users: [1, 1, 2, 3])
            // Carol logged out: her device must receive nothing.
            _ = try await fixture.sql {
                try await DeviceDirectory(client: $0).deactivate(
                    deviceID: ids["tok-carol-old"]!, userID: 3, appID: fixture.appID, logger: workerLogger)
            }
            let job = try await fixture.enqueue(users: [1, 2, 3])
            let status_job = try await fixture.withWorker { try await fixture.finished(job).status }
            #expect(status_job == "completed")
            let deliveries = try await fixture.deliveries(job)
            #expect(Set(deliveries.keys) == ["tok-alice-phone", "tok-alice-tablet", "tok-bob"])
            for delivery in deliveries.values {
                #expect(delivery.status == "sent" && delivery.attempts == 1)
                #expect(delivery.messageID?.isEmpty == false)
            }
            #expect(fixture.emulator.stats(for: "tok-carol-old").accepted == 0)
            #expect(fixture.emulator.stats(for: "tok-bob").accepted == 1)
            // The message carried the job's content plus the device's token, nothing else.
            let body = try #require(fixture.emulator.lastAcceptedMessage(for: "tok-bob")?.requestBody)
            let message = try #require(
                (try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any])?["message"] as? [String: Any])
            #expect(message["token"] as? String == "tok-bob")
            #expect((message["data"] as? [String: String]) == ["k": "v"])
            #expect(fixture.emulator.stats.tokenExchanges == 1)
        }
    }

    @Test func deadTokensAreDeactivatedAndPayloadAgnosticFailuresKeepTheToken() async throws {
        try await WorkerFixture.with { fixture in
            fixture.emulator.script(token: "tok-gone", .unregistered)
            fixture.emulator.script(token: "tok-garbage", .invalidToken)
            fixture.emulator.script(token: "tok-apns-broken", .thirdPartyAuthError)
            try await fixture.register(["tok-ok", "tok-gone", "tok-garbage", "tok-apns-broken"])
            let job = try await fixture.enqueue(users: [1, 2, 3, 4])
            let status_job = try await fixture.withWorker { try await fixture.finished(job).status }
            #expect(status_job == "completed")
            let deliveries = try await fixture.deliveries(job)
            #expect(deliveries["tok-ok"]?.status == "sent")
            #expect(deliveries["tok-gone"]?.status == "failed" && deliveries["tok-gone"]?.errorCode == "UNREGISTERED")
            #expect(deliveries["tok-garbage"]?.errorCode == "INVALID_ARGUMENT")
            #expect(deliveries["tok-apns-broken"]?.errorCode == "THIRD_PARTY_AUTH_ERROR")
            #expect(try await fixture.deviceState("tok-gone") == (false, "unregistered"))
            #expect(try await fixture.deviceState("tok-garbage") == (false, "invalid_token"))
            #expect(try await fixture.deviceState("tok-apns-broken") == (true, nil))
            #expect(try await fixture.deviceState("tok-ok") == (true, nil))
        }
    }

    @Test func transientErrorsAreRetriedHonouringRetryAfter() async throws {
        try await WorkerFixture.with { fixture in
            fixture.emulator.script(token: "tok-flaky", .unavailable(times: 2, retryAfter: nil))
            fixture.emulator.script(token: "tok-500", .internalError(times: 1))
            fixture.emulator.script(token: "tok-quota", .quotaExceeded(times: 1, retryAfter: 1))
            try await fixture.register(["tok-flaky", "tok-500", "tok-quota"])
            let job = try await fixture.enqueue(users: [1, 2, 3])
            let started = ContinuousClock.now
            let status_job = try await fixture.withWorker { try await fixture.finished(job).status }
            #expect(status_job == "completed")
            let deliveries = try await fixture.deliveries(job)
            #expect(deliveries.values.allSatisfy { $0.status == "sent" })
            #expect(deliveries["tok-flaky"]?.attempts == 3)
            #expect(deliveries["tok-500"]?.attempts == 2)
            #expect(deliveries["tok-quota"]?.attempts == 2)
            // Retry-After: 1 was honoured (not retried at once).
            #expect(ContinuousClock.now - started >= .seconds(1))
        }
    }

    @Test func retriesAreBounded() async throws {
        try await WorkerFixture.with { fixture in
            fixture.emulator.script(token: "tok-down", .unavailable(times: 100, retryAfter: 0))
            try await fixture.register(["tok-down"])
            let job = try await fixture.enqueue(users: [1])
            var configuration = fixture.configuration
            configuration.maxAttempts = 3
            let status_job = try await fixture.withWorker(configuration) { try await fixture.finished(job).status }
            #expect(status_job == "completed")
            let delivery = try #require(try await fixture.deliveries(job)["tok-down"])
            #expect(delivery.status == "failed" && delivery.errorCode == "UNAVAILABLE" && delivery.attempts == 3)
            #expect(try await fixture.deviceState("tok-down") == (true, nil))
        }
    }

    /// A worker that crashed with a full chunk of 64 leaves it to a worker with room for 8 at a
    /// time: that one takes the chunk over, sends 8 at a time, holds the rest back, and the job
    /// completes with every device sent once.
    @Test func aWorkerWithLessRoomThanAChunkTakesItOver() async throws {
        try await WorkerFixture.with { fixture in
            let tokens = (1...64).map { "tok-chunk-\($0)" }
            try await fixture.register(tokens)
            let job = try await fixture.enqueue(users: (1...64).map(Int64.init))
            try await fixture.sql { client in
                let crashed = DeliveryQueue(client: client, worker: "crashed", lease: .seconds(30), logger: workerLogger)
                let expanded = try await crashed.expandOldestJob(limit: 65)
                #expect(expanded.claimed.count == 64 && expanded.complete)
                try await client.query("UPDATE push_job_chunks SET lease_until = now() - interval '1 second'")
            }
            var configuration = fixture.configuration
            configuration.concurrency = 8
            let status = try await fixture.withWorker(configuration) { try await fixture.finished(job).status }
            #expect(status == "completed")
            #expect(tokens.allSatisfy { fixture.emulator.stats(for: $0).accepted == 1 })
            #expect(try await fixture.sql { try await count($0, "SELECT count(*)::int FROM push_job_chunks") } == 0)
        }
    }

    /// A chunk whose devices all got their rows, but whose delete was lost (its worker no longer
    /// held it): the worker that takes it over finds nothing to send, deletes it and completes
    /// the job.
    @Test func anExpiredChunkWithNothingLeftIsDeletedAndItsJobCompletes() async throws {
        try await WorkerFixture.with { fixture in
            try await fixture.register((1...5).map { "tok-done-\($0)" })
            let job = try await fixture.enqueue(users: [1, 2, 3, 4, 5])
            try await fixture.sql { client in
                let crashed = DeliveryQueue(client: client, worker: "crashed", lease: .seconds(30), logger: workerLogger)
                let expanded = try await crashed.expandOldestJob(limit: 6)
                #expect(expanded.claimed.count == 5 && expanded.complete)
                _ = try await crashed.write(.init(results: DeliveryQueue.Result.sent(expanded.claimed)))
                try await client.query("UPDATE push_job_chunks SET lease_until = now() - interval '1 second'")
            }
            let status = try await fixture.withWorker { try await fixture.finished(job).status }
            #expect(status == "completed")
            #expect(fixture.emulator.stats.accepted == 0)
            #expect(try await fixture.sql { try await count($0, "SELECT count(*)::int FROM push_job_chunks") } == 0)
        }
    }

    @Test func wholesaleSenderMismatchBlamesTheCredentialsAndDeactivatesNothing() async throws {
        try await WorkerFixture.with { fixture in
            let tokens = (1...12).map { "tok-other-project-\($0)" }
            for token in tokens { fixture.emulator.script(token: token, .senderIDMismatch) }
            try await fixture.register(tokens)
            let job = try await fixture.enqueue(users: (1...12).map(Int64.init))
            var configuration = fixture.configuration
            configuration.concurrency = 4
            let (status, error) = try await fixture.withWorker(configuration) { try await fixture.finished(job) }
            #expect(status == "failed")
            #expect(
                error?.contains("app wowa: every send fails with SENDER_ID_MISMATCH and none to this project has ever succeeded") == true)
            for token in tokens { #expect(try await fixture.deviceState(token) == (true, nil)) }
        }
    }

    @Test func senderMismatchAfterProvenCredentialsDeactivatesThatToken() async throws {
        try await WorkerFixture.with { fixture in
            fixture.emulator.script(token: "tok-z-stray", .senderIDMismatch)
            try await fixture.register(["tok-a-good", "tok-z-stray"])
            var configuration = fixture.configuration
            configuration.concurrency = 1  // the good one (lower id) goes first and proves the credentials
            let job = try await fixture.enqueue(users: [1, 2])
            let status_job = try await fixture.withWorker(configuration) { try await fixture.finished(job).status }
            #expect(status_job == "completed")
            #expect(try await fixture.deviceState("tok-z-stray") == (false, "sender_id_mismatch"))
        }
    }

    /// Once a send to the app's project has succeeded (recorded on the apps row, so a new worker
    /// knows it too), a mismatched token is deactivated even in a job of its own; before, it is
    /// kept, as the credentials may be what is wrong. New credentials for another project start
    /// unproven again.
    @Test func aProvenProjectsMismatchedTokensAreDeactivatedEvenAlone() async throws {
        try await WorkerFixture.with { fixture in
            fixture.emulator.script(token: "tok-stray-1", .senderIDMismatch)
            fixture.emulator.script(token: "tok-stray-2", .senderIDMismatch)
            try await fixture.register(["tok-good", "tok-stray-1", "tok-stray-2"])
            let early = try await fixture.enqueue(users: [2])
            #expect(try await fixture.withWorker { try await fixture.finished(early).status } == "completed")
            #expect(try await fixture.deviceState("tok-stray-1") == (true, nil))

            let proof = try await fixture.enqueue(users: [1])
            #expect(try await fixture.withWorker { try await fixture.finished(proof).status } == "completed")
            let later = try await fixture.enqueue(users: [2])
            let other = try await fixture.enqueue(users: [3])
            let statuses = try await fixture.withWorker {
                [try await fixture.finished(later).status, try await fixture.finished(other).status]
            }
            #expect(statuses == ["completed", "completed"])
            #expect(try await fixture.deviceState("tok-stray-1") == (false, "sender_id_mismatch"))
            #expect(try await fixture.deviceState("tok-stray-2") == (false, "sender_id_mismatch"))

            let proven = try await fixture.sql { client in
                _ = try await client.query("UPDATE apps SET fcm_project_id = 'moved-project' WHERE id = \(fixture.appID)")
                return try await DeliveryQueue(client: client, worker: "t", lease: .seconds(30), logger: workerLogger).jobs([later]).map(
                    \.projectProven)
            }
            #expect(proven == [false])
        }
    }

    /// THIRD_PARTY_AUTH_ERROR is about one platform's credentials in Firebase: those devices
    /// fail and are kept, however many, and the job's other devices are still sent.
    @Test func thirdPartyAuthErrorsFailTheirDevicesOnly() async throws {
        try await WorkerFixture.with { fixture in
            let iOS = (1...12).map { "tok-ios-\($0)" }
            for token in iOS { fixture.emulator.script(token: token, .thirdPartyAuthError) }
            try await fixture.register(iOS, platform: "ios")
            try await fixture.register(["tok-z-android"], users: [13])
            var configuration = fixture.configuration
            configuration.concurrency = 4
            let job = try await fixture.enqueue(users: Array(1...13))
            let status = try await fixture.withWorker(configuration) { try await fixture.finished(job).status }
            #expect(status == "completed")
            let rows = try await fixture.deliveries(job)
            #expect(rows["tok-z-android"]?.status == "sent")
            #expect(iOS.allSatisfy { rows[$0]?.errorCode == "THIRD_PARTY_AUTH_ERROR" })
            for token in iOS { #expect(try await fixture.deviceState(token) == (true, nil)) }
        }
    }

    @Test func refusedCredentialsFailThatAppsJobsOnlyAndDoNotHammer() async throws {
        try await WorkerFixture.with { fixture in
            // A second app whose key the token endpoint has never seen.
            let rogue = try ServiceAccountFixture.generate(projectID: "rogue-project")
            let rogueApp = try await fixture.sql { client in
                try await addApp(
                    client, code: "rogue", projectID: rogue.projectID, clientEmail: fixture.account.clientEmail,
                    privateKeyPEM: rogue.privateKeyPEM, privateKeyID: nil)
            }
            let registered = try await fixture.sql { client in
                try await DeviceDirectory(client: client).register(
                    DeviceRegistration(token: "tok-rogue-\(0)", platform: "ios", deviceID: nil, tokenType: nil), userID: 9, appID: rogueApp,
                    logger: workerLogger)
            }
            #expect(registered.created)
            for i in 1...5 {
                _ = try await fixture.sql { client in
                    try await DeviceDirectory(client: client).register(
                        DeviceRegistration(token: "tok-rogue-\(i)", platform: "ios", deviceID: nil, tokenType: nil), userID: 9,
                        appID: rogueApp, logger: workerLogger)
                }
            }
            try await fixture.register(["tok-fine"])
            let rogueJob = try await fixture.sql { client in
                for try await id in try await client.query(
                    "SELECT push_enqueue(app_code => 'rogue', user_ids => ARRAY[9]::bigint[], message => '{}'::jsonb)"
                ).decode(Int64.self) { return id }
                return Int64(0)
            }
            let goodJob = try await fixture.enqueue(users: [1])
            var noGrace = fixture.configuration
            noGrace.newKeyGrace = .zero
            try await fixture.withWorker(noGrace) {
                let rogueResult = try await fixture.finished(rogueJob)
                #expect(rogueResult.status == "failed")
                #expect(rogueResult.error == "app rogue: token endpoint refused the credentials: Invalid JWT Signature.")
                #expect(try await fixture.finished(goodJob).status == "completed")
            }
            // One refused exchange, not one per device.
            #expect(fixture.emulator.stats.rejectedTokenExchanges == 1)
            #expect(try await fixture.deliveries(rogueJob).values.allSatisfy { $0.status == "failed" })
        }
    }

    /// A key rotated in a moment ago: Google answers `invalid_grant` until it has the key
    /// everywhere. The app's deliveries wait for it, spending no attempt, and go out once it does.
    @Test func aNewKeyRefusedAtFirstIsWaitedForAndItsJobCompletes() async throws {
        try await WorkerFixture.with { fixture in
            let rotated = try ServiceAccountFixture.generate(projectID: "rotated-project")
            let app = try await fixture.sql { client in
                try await addApp(
                    client, code: "rotated", projectID: rotated.projectID, clientEmail: rotated.clientEmail,
                    privateKeyPEM: rotated.privateKeyPEM, privateKeyID: rotated.privateKeyID)
            }
            for i in 1...3 {
                _ = try await fixture.sql { client in
                    try await DeviceDirectory(client: client).register(
                        DeviceRegistration(token: "tok-rotated-\(i)", platform: "android", deviceID: nil, tokenType: nil), userID: 4,
                        appID: app, logger: workerLogger)
                }
            }
            let job = try await fixture.sql { client in
                for try await id in try await client.query(
                    "SELECT push_enqueue(app_code => 'rotated', user_ids => ARRAY[4]::bigint[], message => '{}'::jsonb)"
                ).decode(Int64.self) { return id }
                return Int64(0)
            }
            try await fixture.withWorker {
                let deadline = ContinuousClock.now + .seconds(10)
                var waiting = try await fixture.deliveries(job)
                while waiting.count < 3 && ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(100))
                    waiting = try await fixture.deliveries(job)
                }
                #expect(fixture.emulator.stats.rejectedTokenExchanges >= 1)
                #expect(
                    waiting.count == 3
                        && waiting.values.allSatisfy { $0.status == "pending" && $0.errorCode == "OAUTH_UNAVAILABLE" && $0.attempts == 0 },
                    "\(waiting)")
                fixture.emulator.registerServiceAccount(rotated.serviceAccount)
                #expect(try await fixture.finished(job).status == "completed")
            }
            let rows = try await fixture.deliveries(job)
            #expect(rows.count == 3 && rows.values.allSatisfy { $0.status == "sent" && $0.attempts == 1 }, "\(rows)")
        }
    }

    @Test func expiredOrRevokedAccessTokensAreRefreshedOnceAndTheSendRetried() async throws {
        try await WorkerFixture.with { fixture in
            try await fixture.register(["tok-1", "tok-2"])
            try await fixture.withWorker {
                let first = try await fixture.enqueue(users: [1])
                #expect(try await fixture.finished(first).status == "completed")
                fixture.emulator.revokeAccessTokens()
                let second = try await fixture.enqueue(users: [2])
                #expect(try await fixture.finished(second).status == "completed")
                #expect(try await fixture.deliveries(second)["tok-2"]?.status == "sent")
            }
            #expect(fixture.emulator.stats.tokenExchanges == 2)
        }
    }

    /// One send of a batch meets a revoked access token and the refresh then fails: only that
    /// send waits for a retry; the batch's other answers stand and are never sent again.
    @Test func aFailedRefreshAfterA401SettlesOnlyTheRefusedSend() async throws {
        try await WorkerFixture.with { fixture in
            try await fixture.register(["tok-warm", "tok-ok", "tok-revoked"])
            try await fixture.withWorker {
                let warm = try await fixture.enqueue(users: [1])
                #expect(try await fixture.finished(warm).status == "completed")
                fixture.emulator.script(token: "tok-revoked", .unauthenticated(times: 1))
                fixture.emulator.failNextTokenRequests(count: 1)
                let job = try await fixture.enqueue(users: [2, 3])
                #expect(try await fixture.finished(job).status == "completed")
                let rows = try await fixture.deliveries(job)
                #expect(rows["tok-ok"]?.status == "sent" && rows["tok-ok"]?.attempts == 1 && rows["tok-ok"]?.messageID != nil)
                #expect(rows["tok-revoked"]?.status == "sent")
            }
            #expect(fixture.emulator.stats(for: "tok-ok").accepted == 1, "a send FCM had accepted was sent again")
            #expect(fixture.emulator.stats(for: "tok-revoked").accepted == 1)
            #expect(fixture.emulator.stats.rejectedTokenExchanges == 1)
        }
    }

    /// A 404 without an FcmError (here FCM_BASE_URL with a path the server does not serve) is
    /// no verdict on the tokens. From one device or a few it fails those deliveries; from ten
    /// with nothing accepted it fails the job and says where to look. Nothing is deactivated.
    @Test func bare404sFailTheirDevicesThenTheJobAndDeactivateNothing() async throws {
        try await WorkerFixture.with { fixture in
            let tokens = (1...12).map { "tok-\($0)" }
            try await fixture.register(tokens)
            var configuration = fixture.configuration
            configuration.fcmBaseURL = fixture.emulator.baseURL + "/not-fcm"
            let few = try await fixture.enqueue(users: [1, 2])
            let all = try await fixture.enqueue(users: Array(1...12))
            let (fewEnd, allEnd) = try await fixture.withWorker(configuration) {
                (try await fixture.finished(few), try await fixture.finished(all))
            }
            #expect(fewEnd.status == "completed")
            #expect(try await fixture.deliveries(few).values.allSatisfy { $0.status == "failed" && $0.errorCode == "NOT_FOUND" })
            #expect(allEnd.status == "failed")
            #expect(allEnd.error?.contains("FCM answered 404 without an FcmError") == true, "\(allEnd.error ?? "")")
            let rows = try await fixture.deliveries(all)
            #expect(rows.count == 12 && rows.values.allSatisfy { $0.errorCode == "NOT_FOUND" || $0.errorCode == "JOB_FAILED" })
            let active = try await fixture.sql { try await count($0, "SELECT count(*)::int FROM push_devices WHERE is_active") }
            #expect(active == 12)
        }
    }

    /// Answers without an FcmError from one device each (a bare 400, 403 or 404, as a proxy
    /// sends them) fail those devices only: the campaign goes on to everyone else and
    /// completes, and no token is deactivated on such thin evidence.
    @Test func oneDeviceAnsweringWithoutAnFcmErrorNeverEndsACampaign() async throws {
        try await WorkerFixture.with { fixture in
            // Registered first, so their answers come before most of the others.
            let odd = ["tok-bare-400": 400, "tok-bare-403": 403, "tok-bare-404": 404]
            for (token, status) in odd.sorted(by: { $0.value < $1.value }) {
                try await fixture.register([token], users: [Int64(1000 + status)])
                fixture.emulator.script(token: token, .bareError(status: status))
            }
            _ = try await fixture.sql { client in
                try await client.query(
                    """
                    INSERT INTO push_devices (user_id, app_id, token, platform)
                    SELECT g, \(fixture.appID), 'tok-camp-' || g, 'android' FROM generate_series(1, 110) g
                    """)
            }
            let job = try await fixture.campaign()
            let end = try await fixture.withWorker { try await fixture.finished(job) }
            #expect(end.status == "completed", "\(end.error ?? "")")
            let rows = try await fixture.deliveries(job)
            #expect(rows.count == 113)
            #expect(rows.values.filter { $0.status == "sent" }.count == 110)
            #expect(rows["tok-bare-400"]?.status == "failed" && rows["tok-bare-400"]?.errorCode == "INVALID_ARGUMENT")
            #expect(rows["tok-bare-403"]?.status == "failed" && rows["tok-bare-403"]?.errorCode == "PERMISSION_DENIED")
            #expect(rows["tok-bare-404"]?.status == "failed" && rows["tok-bare-404"]?.errorCode == "NOT_FOUND")
            let active = try await fixture.sql { try await count($0, "SELECT count(*)::int FROM push_devices WHERE is_active") }
            #expect(active == 113)
        }
    }

    /// FCM answering one app's project with 503s while it takes another app's sends: that app
    /// alone waits, spending no more attempts, while the other's jobs go out; once FCM takes its
    /// sends again its job completes, every device sent. Its 503s come first, taken at first for
    /// FCM's brown-out: the other app's jobs, queued then, are not left waiting behind its probes.
    @Test func oneAppsServerErrorsWhileAnotherIsAnsweredWellHoldThatAppOnly() async throws {
        try await WorkerFixture.with { fixture in
            let sickApp = try await fixture.addOtherApp(code: "sick")
            let tokens = (1...40).map { "tok-sick-\($0)" }
            try await fixture.sql { (client: PostgresClient) async throws -> Void in
                for (index, token) in tokens.enumerated() {
                    _ = try await DeviceDirectory(client: client).register(
                        DeviceRegistration(token: token, platform: "android", deviceID: nil, tokenType: nil), userID: Int64(index + 1),
                        appID: sickApp, logger: workerLogger)
                }
            }
            try await fixture.register((1...40).map { "tok-well-\($0)" })
            fixture.emulator.script(tokenPrefix: "tok-sick-", .unavailable(times: 100_000, retryAfter: nil))
            let log = CapturedLog()
            var worker = WorkerService(configuration: fixture.configuration)
            worker.logger = log.logger(level: .info)
            let appsWarning = "warning FCM answers most of the app's sends with server errors and other apps' well"
            let (sick, ended, later) = try await fixture.withWorkers([worker]) {
                () async throws -> (Int64, (status: String, error: String?), Int64) in
                let sick = try await fixture.sql { client in
                    try await JobDirectory(client: client, logger: workerLogger).enqueue(
                        appCode: "sick", userIDs: nil, platforms: nil, message: #"{"notification":{"title":"Hi"}}"#,
                        idempotencyKey: nil, sendAt: nil, dryRun: false
                    ).id
                }
                // The sick app's 503s first, with nothing to tell them apart from FCM failing:
                // FCM's brown-out. Its probes go to the other app's campaign too; once FCM is seen
                // taking the other app's sends, the 503s are the sick app's own.
                let fcmWarning = "warning FCM answers most sends with server errors"
                let brownOut = ContinuousClock.now + .seconds(30)
                while !log.lines.contains(where: { $0.hasPrefix(fcmWarning) }) && ContinuousClock.now < brownOut {
                    try await Task.sleep(for: .milliseconds(20))
                }
                #expect(log.lines.contains { $0.hasPrefix(fcmWarning) }, "\(log.lines)")
                let deadline = ContinuousClock.now + .seconds(60)
                while !log.lines.contains(where: { $0.hasPrefix(appsWarning) }) && ContinuousClock.now < deadline {
                    #expect(try await fixture.finished(try await fixture.campaign()).status == "completed")
                }
                let later = try await fixture.campaign()
                #expect(try await fixture.finished(later).status == "completed")
                // Its backlog waits: one probe at each pause's end (1 s, then 2 s), not its
                // forty deliveries each time.
                func sickRequests() -> Int {
                    fixture.emulator.stats.devices.filter { $0.key.hasPrefix("tok-sick-") }.values.reduce(0) { $0 + $1.rejected }
                }
                try await Task.sleep(for: .milliseconds(300))
                let before = sickRequests()
                try await Task.sleep(for: .milliseconds(3500))
                #expect(sickRequests() - before <= 4, "the sick app's requests in 3.5 s: \(sickRequests() - before)")
                let held = try await fixture.deliveries(sick)
                #expect(held.values.allSatisfy { $0.status == "pending" && $0.attempts <= 1 }, "\(held.values.map(\.attempts))")
                fixture.emulator.script(tokenPrefix: "tok-sick-", .success)
                return (sick, try await fixture.finished(sick, within: .seconds(90)), later)
            }
            #expect(ended.status == "completed", "\(ended)")
            #expect(try await fixture.deliveries(later).values.allSatisfy { $0.status == "sent" && $0.attempts == 1 })
            let rows = try await fixture.deliveries(sick)
            // At most one attempt spent before the app's answers were mostly 503s, and the one that went through.
            #expect(
                rows.count == 40 && rows.values.allSatisfy { $0.status == "sent" && $0.attempts <= 2 },
                "\(rows.values.map { "\($0.status)/\($0.attempts)" })")
            #expect(rows.values.count { $0.attempts == 1 } >= 40 - FCMServerFailures.fewestAnswers)
            let lines = log.lines
            #expect(lines.count { $0.hasPrefix(appsWarning) && $0.contains("sick") } == 1, "\(lines)")
            #expect(lines.contains { $0.hasPrefix("notice FCM answers the app's sends again") && $0.contains("sick") })
        }
    }

    /// The token endpoint unavailable: the worker backs off from it (requests at 0 s, 1 s, 3 s,
    /// not one per batch), spends no delivery attempt while nothing reaches FCM, and sends
    /// everything once the endpoint is back.
    @Test func anUnavailableTokenEndpointIsBackedOffFromWithoutSpendingAttempts() async throws {
        try await WorkerFixture.with { fixture in
            let tokens = (1...40).map { "tok-wait-\($0)" }
            try await fixture.register(tokens)
            fixture.emulator.failNextTokenRequests(count: 1000)
            let job = try await fixture.campaign()
            let (refused, status) = try await fixture.withWorker {
                // Counted from the first refusal, however long the worker took to start.
                let deadline = ContinuousClock.now + .seconds(10)
                while fixture.emulator.stats.rejectedTokenExchanges == 0 && ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(20))
                }
                try await Task.sleep(for: .milliseconds(3200))
                let refused = fixture.emulator.stats.rejectedTokenExchanges
                fixture.emulator.failNextTokenRequests(count: 0)
                return (refused, try await fixture.finished(job).status)
            }
            #expect((2...3).contains(refused), "token requests in 3.2 s from the first: \(refused)")
            #expect(status == "completed")
            let rows = try await fixture.deliveries(job)
            #expect(
                rows.count == 40 && rows.values.allSatisfy { $0.status == "sent" && $0.attempts == 1 },
                "\(rows.values.map { "\($0.status)/\($0.attempts)" })")
        }
    }

    @Test func aTokenEndpointOutageLongerThanTheBoundFailsTheJobAndEndsWhenItAnswers() async throws {
        try await WorkerFixture.with { fixture in
            try await fixture.register((1...5).map { "tok-outage-\($0)" })
            fixture.emulator.failNextTokenRequests(count: 1000)
            var configuration = fixture.configuration
            configuration.longestTokenOutage = .seconds(2)
            let job = try await fixture.campaign()
            let (ended, later) = try await fixture.withWorker(configuration) {
                let ended = try await fixture.finished(job)
                // Once it answers again (after the cache's backoff), jobs go through.
                fixture.emulator.failNextTokenRequests(count: 0)
                try await Task.sleep(for: .seconds(5))
                let later = try await fixture.campaign()
                return (ended, try await fixture.finished(later).status)
            }
            #expect(ended.status == "failed")
            #expect(ended.error?.contains("app wowa: token endpoint unavailable for over 2 s: HTTP 503") == true, "\(ended.error ?? "")")
            let rows = try await fixture.deliveries(job)
            #expect(
                rows.count == 5
                    && rows.values.allSatisfy { $0.status == "failed" && $0.errorCode == "OAUTH_UNAVAILABLE" && $0.attempts == 0 },
                "\(rows.values.map { "\($0.status)/\($0.errorCode ?? "-")/\($0.attempts)" })")
            #expect(later == "completed")
        }
    }

    @Test func streamsAGoAwayRefusedAreSentAgainWithoutSpendingAnAttempt() async throws {
        try await WorkerFixture.with { fixture in
            try await fixture.register((1...40).map { "tok-goaway-\($0)" })
            // Each connection ends after 20 streams: a batch of 40 has 20 refused.
            fixture.emulator.goAway(afterStreams: 20)
            let job = try await fixture.campaign()
            let status = try await fixture.withWorker { try await fixture.finished(job).status }
            #expect(status == "completed")
            let rows = try await fixture.deliveries(job)
            #expect(
                rows.count == 40 && rows.values.allSatisfy { $0.status == "sent" && $0.attempts == 1 },
                "\(rows.values.map { "\($0.status)/\($0.errorCode ?? "-")/\($0.attempts)" })")
            #expect(fixture.emulator.stats.accepted == 40)
        }
    }

    @Test func concurrentSendsShareOneTokenRefresh() async throws {
        try await WorkerFixture.with { fixture in
            let tokens = (1...150).map { "tok-many-\($0)" }
            try await fixture.register(tokens)
            let job = try await fixture.campaign()
            let status_job = try await fixture.withWorker { try await fixture.finished(job).status }
            #expect(status_job == "completed")
            #expect(fixture.emulator.stats.tokenExchanges == 1)
            #expect(fixture.emulator.stats.accepted == 150)
        }
    }

    @Test func appWithoutCredentialsFailsItsJobClearly() async throws {
        try await WorkerFixture.with { fixture in
            try await fixture.sql { client in
                _ = try await addApp(client, code: "bare", projectID: nil, clientEmail: nil, privateKeyPEM: nil, privateKeyID: nil)
            }
            let job = try await fixture.sql { client in
                for try await id in try await client.query(
                    "SELECT push_enqueue(app_code => 'bare', user_ids => ARRAY[1]::bigint[], message => '{}'::jsonb)"
                ).decode(Int64.self) { return id }
                return Int64(0)
            }
            // No devices: the job completes with an empty audience. With one device it fails.
            let status_job = try await fixture.withWorker { try await fixture.finished(job).status }
            #expect(status_job == "completed")
        }
    }

    @Test func idempotentEnqueueScheduledJobsAndDryRuns() async throws {
        try await WorkerFixture.with { fixture in
            try await fixture.register(["tok-once", "tok-later", "tok-dry"])
            let first = try await fixture.enqueue(users: [1], key: "order-981-shipped")
            let again = try await fixture.enqueue(users: [1], key: "order-981-shipped")
            #expect(first == again)
            let later = try await fixture.enqueue(users: [2], sendAt: Date().addingTimeInterval(2))
            let dry = try await fixture.enqueue(users: [3], dryRun: true)
            try await fixture.withWorker { () async throws in
                #expect(try await fixture.finished(first).status == "completed")
                #expect(try await fixture.finished(dry).status == "completed")
                #expect(try await fixture.finished(later).status == "completed")
            }
            // The scheduled job was sent at its time, not before.
            let early = try await fixture.sql { client in
                for try await n in try await client.query(
                    "SELECT count(*)::int FROM push_deliveries d JOIN push_jobs j ON j.id = d.job_id WHERE j.id = \(later) AND d.updated_at < j.send_at"
                ).decode(Int.self) { return n }
                return -1
            }
            #expect(early == 0)
            #expect(fixture.emulator.stats(for: "tok-once").accepted == 1)
            #expect(fixture.emulator.stats(for: "tok-later").accepted == 1)
            #expect(fixture.emulator.stats(for: "tok-dry") == DeviceStats(accepted: 0, rejected: 0, validateOnly: 1))
        }
    }

    @Test func twoWorkersOnOneCampaignNeverSendADeviceTwice() async throws {
        try await WorkerFixture.with { fixture in
            let tokens = (1...600).map { "tok-shared-\($0)" }
            _ = try await fixture.sql { client in
                try await client.query(
                    """
                    INSERT INTO push_devices (user_id, app_id, token, platform)
                    SELECT g, \(fixture.appID), 'tok-shared-' || g, 'android' FROM generate_series(1, 600) g
                    """)
            }
            // Both expand the audience as they send, taking turns on the job row.
            let firstConfiguration = fixture.configuration
            var secondConfiguration = firstConfiguration
            secondConfiguration.workerName = "second-worker"
            let (first, second) = (firstConfiguration, secondConfiguration)
            let job = try await fixture.campaign()
            try await fixture.withWorker(first) {
                let status_job = try await fixture.withWorker(second) { try await fixture.finished(job).status }
                #expect(status_job == "completed")
            }
            #expect(tokens.allSatisfy { fixture.emulator.stats(for: $0).accepted == 1 })
            let rows = try await fixture.deliveries(job)
            #expect(rows.count == 600 && rows.values.allSatisfy { $0.status == "sent" })
        }
    }

    @Test func enqueueRefusesBadInputAndChangesNothing() async throws {
        try await WorkerFixture.with { fixture in
            let bad = [
                "SELECT push_enqueue(app_code => 'nope', user_ids => ARRAY[1]::bigint[], message => '{}'::jsonb)",
                "SELECT push_enqueue(app_code => 'wowa', user_ids => ARRAY[1]::bigint[], message => '{\"token\":\"x\"}'::jsonb)",
                "SELECT push_enqueue(app_code => 'wowa', user_ids => ARRAY[1]::bigint[], message => '{\"data\":{\"n\":1}}'::jsonb)",
                "SELECT push_enqueue(app_code => 'wowa', user_ids => ARRAY[1]::bigint[], message => '{\"data\":{\"from\":\"x\"}}'::jsonb)",
                "SELECT push_enqueue(app_code => 'wowa', user_ids => ARRAY[1]::bigint[], message => '[1]'::jsonb)",
                "SELECT push_enqueue(app_code => 'wowa', user_ids => ARRAY[]::bigint[], message => '{}'::jsonb)",
                "SELECT push_enqueue_campaign(app_code => 'wowa', message => '{}'::jsonb, platforms => ARRAY['tv'])",
                "SELECT push_enqueue_campaign(app_code => 'wowa', message => jsonb_build_object('data', jsonb_build_object('big', repeat('x', 5000))))",
            ]
            for statement in bad {
                await #expect(throws: PSQLError.self, "\(statement)") {
                    // A function's error arrives with its rows: read them.
                    try await fixture.sql { for try await _ in try await $0.query(PostgresQuery(unsafeSQL: statement)) {} }
                }
            }
            let jobs = try await fixture.sql { client in
                for try await n in try await client.query("SELECT count(*)::int FROM push_jobs").decode(Int.self) { return n }
                return -1
            }
            #expect(jobs == 0)
        }
    }
}
