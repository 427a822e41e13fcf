import Synchronization

/// Errors a scripted outcome makes a send answer with.
enum ScriptedFailure: Sendable, Equatable {
    case unregistered
    case invalidToken
    case senderIDMismatch
    case thirdPartyAuthError
    case unavailable(retryAfter: Int?)
    case internalError
    case quotaExceeded(retryAfter: Int?)
    case rateLimitExceeded(retryAfter: Int?)
    case unauthenticated
    case bare(status: Int)
}

/// Scripted outcomes per device token and the record of what each token was sent: the state every send
/// consults. One lock, held only for dictionary updates.
final class DeliveryLedger: Sendable {
    enum Verdict: Sendable, Equatable {
        case deliver(after: Duration?)
        case fail(ScriptedFailure)
    }

    fileprivate struct State {
        var scripts: [String: Outcome] = [:]
        var prefixRules: [PrefixRule]
        /// Failures already served for transient outcomes (`unavailable(times:)` …), per token.
        var transientFailuresServed: [String: Int] = [:]
        var stats = EmulatorStats()
        var recent: RecentMessages
    }

    private let state: Mutex<State>
    private let configuredPrefixRules: [PrefixRule]
    private let retainedMessageLimit: Int

    init(prefixRules: [PrefixRule], retainedMessageLimit: Int) {
        self.configuredPrefixRules = prefixRules
        self.retainedMessageLimit = retainedMessageLimit
        self.state = Mutex(State(prefixRules: prefixRules, recent: RecentMessages(capacity: retainedMessageLimit)))
    }

    func script(token: String, outcome: Outcome) {
        state.withLock {
            $0.scripts[token] = outcome
            $0.transientFailuresServed[token] = nil
        }
    }

    /// The newest rule wins over older ones with an overlapping prefix.
    func addPrefixRule(_ rule: PrefixRule) {
        state.withLock { $0.prefixRules.insert(rule, at: 0) }
    }

    /// Decides the answer for a send to `token` and counts it when it is a failure.
    /// Dry runs (`validate_only`) see permanent failures, like FCM checking the token, but neither consume
    /// transient ones nor wait.
    func admit(deviceToken token: String, validateOnly: Bool) -> Verdict {
        state.withLock { state in
            let outcome =
                state.scripts[token]
                ?? state.prefixRules.first(where: { token.hasPrefix($0.prefix) })?.outcome
                ?? .success
            let verdict: Verdict
            switch outcome {
            case .success: verdict = .deliver(after: nil)
            case .slow(let delay): verdict = .deliver(after: validateOnly ? nil : delay)
            case .unregistered: verdict = .fail(.unregistered)
            case .invalidToken: verdict = .fail(.invalidToken)
            case .senderIDMismatch: verdict = .fail(.senderIDMismatch)
            case .thirdPartyAuthError: verdict = .fail(.thirdPartyAuthError)
            case .unavailable(let times, let retryAfter):
                verdict = state.transient(token, times: times, validateOnly: validateOnly, .unavailable(retryAfter: retryAfter))
            case .internalError(let times):
                verdict = state.transient(token, times: times, validateOnly: validateOnly, .internalError)
            case .quotaExceeded(let times, let retryAfter):
                verdict = state.transient(token, times: times, validateOnly: validateOnly, .quotaExceeded(retryAfter: retryAfter))
            case .rateLimitExceeded(let times, let retryAfter):
                verdict = state.transient(token, times: times, validateOnly: validateOnly, .rateLimitExceeded(retryAfter: retryAfter))
            case .unauthenticated(let times):
                verdict = state.transient(token, times: times, validateOnly: validateOnly, .unauthenticated)
            case .bareError(let status): verdict = .fail(.bare(status: status))
            }
            if case .fail = verdict {
                state.countRejected(deviceToken: token)
            }
            return verdict
        }
    }

    func recordAccepted(_ message: AcceptedMessage) {
        state.withLock { state in
            state.stats.accepted += 1
            if let token = message.deviceToken {
                state.stats.devices[token, default: DeviceStats()].accepted += 1
                if state.stats.devices[token]?.accepted == 1 { state.stats.distinctAcceptedTokens += 1 }
            }
            state.recent.append(message)
        }
    }

    func recordValidateOnly(deviceToken: String?) {
        state.withLock { state in
            state.stats.validateOnly += 1
            if let deviceToken {
                state.stats.devices[deviceToken, default: DeviceStats()].validateOnly += 1
            }
        }
    }

    func recordRejected(deviceToken: String?) {
        state.withLock { $0.countRejected(deviceToken: deviceToken) }
    }

    func recordTokenExchange(succeeded: Bool) {
        state.withLock { state in
            if succeeded {
                state.stats.tokenExchanges += 1
            } else {
                state.stats.rejectedTokenExchanges += 1
            }
        }
    }

    func recordOutageRefusedConnection() {
        state.withLock { $0.stats.outageRefusedConnections += 1 }
    }

    func recordOutageDroppedStreams(_ count: Int) {
        guard count > 0 else { return }
        state.withLock { $0.stats.outageDroppedStreams += count }
    }

    func stats(includingDevices: Bool = true) -> EmulatorStats {
        state.withLock { state in
            guard includingDevices else {
                var summary = state.stats
                summary.devices = [:]
                return summary
            }
            return state.stats
        }
    }

    func deviceStats(for token: String) -> DeviceStats {
        state.withLock { $0.stats.devices[token] ?? DeviceStats() }
    }

    func lastAcceptedMessage(for token: String) -> AcceptedMessage? {
        state.withLock { $0.recent.last(where: { $0.deviceToken == token }) }
    }

    func recentAcceptedMessages() -> [AcceptedMessage] {
        state.withLock { $0.recent.inOrder() }
    }

    /// Forgets scripts, counters and retained messages; prefix rules go back to the configured ones.
    func reset() {
        state.withLock {
            $0 = State(prefixRules: configuredPrefixRules, recent: RecentMessages(capacity: retainedMessageLimit))
        }
    }
}

extension DeliveryLedger.State {
    fileprivate mutating func transient(
        _ token: String,
        times: Int,
        validateOnly: Bool,
        _ failure: ScriptedFailure
    ) -> DeliveryLedger.Verdict {
        guard !validateOnly else { return .deliver(after: nil) }
        let served = transientFailuresServed[token, default: 0]
        guard served < times else { return .deliver(after: nil) }
        transientFailuresServed[token] = served + 1
        return .fail(failure)
    }

    fileprivate mutating func countRejected(deviceToken: String?) {
        stats.rejected += 1
        if let deviceToken {
            stats.devices[deviceToken, default: DeviceStats()].rejected += 1
        }
    }
}

/// A ring of the most recent accepted messages, so memory stays bounded however many sends arrive.
struct RecentMessages {
    private var storage: [AcceptedMessage] = []
    private var nextSlot = 0
    let capacity: Int

    init(capacity: Int) {
        self.capacity = max(0, capacity)
    }

    mutating func append(_ message: AcceptedMessage) {
        guard capacity > 0 else { return }
        if storage.count < capacity {
            storage.append(message)
        } else {
            storage[nextSlot] = message
        }
        nextSlot = (nextSlot + 1) % capacity
    }

    /// Oldest first.
    func inOrder() -> [AcceptedMessage] {
        guard storage.count == capacity else { return storage }
        return Array(storage[nextSlot...] + storage[..<nextSlot])
    }

    func last(where predicate: (AcceptedMessage) -> Bool) -> AcceptedMessage? {
        inOrder().last(where: predicate)
    }
}
