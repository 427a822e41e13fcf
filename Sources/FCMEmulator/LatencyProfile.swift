import Synchronization

/// How long FCM takes to answer a send: delays with their shares of sends, a slow tail included,
/// e.g. `50%:30ms,39%:60ms,10%:150ms,1%:2s`. The emulator waits a delay drawn from it before
/// answering each send it delivers; a scripted `slow` outcome's delay wins.
public struct LatencyProfile: Sendable, Equatable {
    public struct Share: Sendable, Equatable {
        public let percent: Double
        public let delay: Duration
    }

    /// Shares are counted in millionths of all sends, so that they add up exactly.
    private static let millionthsPerPercent = 10_000
    private static let whole = 100 * millionthsPerPercent
    private static let longestDelayNanoseconds: Int64 = 3600 * 1_000_000_000

    public let shares: [Share]
    /// `upperBounds[i]`: the draws below it (and at or above `upperBounds[i - 1]`) take `shares[i].delay`.
    private let upperBounds: [Int]

    /// Parses `PERCENT%:DELAY,...`: percentages with up to 4 decimals that add up to 100, delays
    /// with the unit `ms` or `s` (e.g. `30ms`, `1.5s`), up to an hour.
    public init(parsing text: String) throws(LatencyProfileError) {
        let entries = text.split(separator: ",", omittingEmptySubsequences: false).map(Self.trimmed)
        guard entries != [""] else { throw .empty }
        var shares: [Share] = []
        var upperBounds: [Int] = []
        var total = 0
        for entry in entries {
            let parts = entry.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, parts[0].hasSuffix("%") else { throw .malformedShare(String(entry)) }
            let percentText = parts[0].dropLast()
            guard let millionths = Self.millionths(percent: percentText), millionths > 0 else {
                throw .invalidPercentage(String(entry))
            }
            guard let delay = Self.delay(parts[1]) else { throw .invalidDelay(String(entry)) }
            total += millionths
            shares.append(Share(percent: Double(millionths) / Double(Self.millionthsPerPercent), delay: delay))
            upperBounds.append(total)
        }
        guard total == Self.whole else { throw .sharesDoNotAddUpTo100(totalPercent: Double(total) / Double(Self.millionthsPerPercent)) }
        self.shares = shares
        self.upperBounds = upperBounds
    }

    /// A delay drawn at random with the profile's shares.
    public func sample() -> Duration {
        let draw = Int.random(in: 0..<Self.whole)
        // A handful of shares: a scan beats a binary search.
        for (index, bound) in upperBounds.enumerated() where draw < bound {
            return shares[index].delay
        }
        return shares[shares.count - 1].delay
    }

    /// `12.5` → 125_000 millionths; nil unless digits with an optional fraction of up to 4 digits.
    private static func millionths(percent text: Substring) -> Int? {
        guard let (whole, fraction) = decimalParts(text), whole.count <= 3, fraction.count <= 4 else { return nil }
        let paddedFraction = fraction + String(repeating: "0", count: 4 - fraction.count)
        guard let units = Int(whole), let fractionUnits = Int(paddedFraction) else { return nil }
        return units * millionthsPerPercent + fractionUnits
    }

    private static func delay(_ text: Substring) -> Duration? {
        let number: Substring
        let unitNanoseconds: Double
        if text.hasSuffix("ms") {
            (number, unitNanoseconds) = (text.dropLast(2), 1e6)
        } else if text.hasSuffix("s") {
            (number, unitNanoseconds) = (text.dropLast(1), 1e9)
        } else {
            return nil
        }
        // Digits only: Double would also take "1e3", "inf" and "nan".
        guard decimalParts(number) != nil, let value = Double(number) else { return nil }
        let nanoseconds = (value * unitNanoseconds).rounded()
        guard nanoseconds <= Double(longestDelayNanoseconds) else { return nil }
        return .nanoseconds(Int64(nanoseconds))
    }

    /// The digits before and after the point of `12` or `12.5`; nil for anything else.
    private static func decimalParts(_ text: Substring) -> (whole: Substring, fraction: Substring)? {
        let parts = text.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
        guard let whole = parts.first, !whole.isEmpty, whole.count <= 12, whole.allSatisfy(\.isASCIIDigit) else { return nil }
        guard parts.count == 2 else { return (whole, "") }
        guard !parts[1].isEmpty, parts[1].count <= 9, parts[1].allSatisfy(\.isASCIIDigit) else { return nil }
        return (whole, parts[1])
    }

    private static func trimmed(_ text: Substring) -> Substring {
        guard let first = text.firstIndex(where: { !$0.isWhitespace }), let last = text.lastIndex(where: { !$0.isWhitespace }) else {
            return ""
        }
        return text[first...last]
    }
}

public enum LatencyProfileError: Error, Equatable, CustomStringConvertible {
    case empty
    /// An entry that is not `PERCENT%:DELAY`.
    case malformedShare(String)
    case invalidPercentage(String)
    case invalidDelay(String)
    case sharesDoNotAddUpTo100(totalPercent: Double)

    public var description: String {
        let format = "a latency profile is PERCENT%:DELAY,... with percentages adding up to 100, e.g. 50%:30ms,39%:60ms,10%:150ms,1%:2s"
        return switch self {
        case .empty: "the latency profile is empty: \(format)"
        case .malformedShare(let entry): "\"\(entry)\" is not PERCENT%:DELAY: \(format)"
        case .invalidPercentage(let entry):
            "\"\(entry)\": the percentage must be a number above 0 with at most 4 decimals, followed by %"
        case .invalidDelay(let entry): "\"\(entry)\": the delay must be a number with the unit ms or s (e.g. 30ms, 1.5s), up to 3600s"
        case .sharesDoNotAddUpTo100(let total):
            "the percentages add up to \(total == total.rounded() ? String(Int(total)) : String(total))%, not 100%: \(format)"
        }
    }
}

/// The latency profile in force, changeable while sends are in flight.
final class LatencySetting: Sendable {
    private let profile: Mutex<LatencyProfile?>

    init(_ profile: LatencyProfile?) {
        self.profile = Mutex(profile)
    }

    func set(_ newProfile: LatencyProfile?) {
        profile.withLock { $0 = newProfile }
    }

    /// A delay for a send about to be delivered; nil without a profile.
    func sample() -> Duration? {
        profile.withLock { $0 }?.sample()
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { ("0"..."9").contains(self) }
}
