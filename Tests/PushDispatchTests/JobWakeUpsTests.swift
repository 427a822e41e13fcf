import DeviceRegistry
import PushDispatch
import ServiceSupport
import Testing

@Suite("How a worker hears of new jobs")
struct JobWakeUpsTests {
    @Test func aDirectConnectionListensOnThePool() {
        #expect(JobWakeUps(databasePooler: .session, listenURL: nil) == .listenOnPool)
    }

    @Test func aTransactionPoolerWithoutAListenURLPolls() {
        #expect(JobWakeUps(databasePooler: .transaction, listenURL: nil) == .polling)
    }

    @Test(arguments: PoolerMode.allCases)
    func aListenURLIsUsedWheneverSet(pooler: PoolerMode) {
        #expect(JobWakeUps(databasePooler: pooler, listenURL: "postgres://u@db/push") == .listen(url: "postgres://u@db/push"))
    }

    @Test func theListenURLMustKeepItsSessions() {
        let environment = ["DATABASE_URL": "postgres://u@pooler/push?pooler=transaction"]
        #expect(throws: Never.self) {
            try DispatchConfiguration.fromEnvironment(environment.merging(["DATABASE_LISTEN_URL": "postgres://u@db/push"]) { $1 })
        }
        #expect(throws: ConfigurationError.invalid("DATABASE_LISTEN_URL", "pooler 'sometimes' is not one of session, transaction")) {
            try DispatchConfiguration.fromEnvironment(
                environment.merging(["DATABASE_LISTEN_URL": "postgres://u@db/push?pooler=sometimes"]) { $1 })
        }
    }
}
