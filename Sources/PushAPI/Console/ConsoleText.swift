import DeviceRegistry
import Foundation
import Hummingbird

/// How the console writes times, ages and links.
enum ConsoleText {
    /// UTC to the second, e.g. `2026-11-21 14:13:54 UTC`: one zone for every admin.
    static func time(_ date: Date) -> String {
        date.formatted(
            Date.VerbatimFormatStyle(
                format:
                    "\(year: .defaultDigits)-\(month: .twoDigits)-\(day: .twoDigits) \(hour: .twoDigits(clock: .twentyFourHour, hourCycle: .zeroBased)):\(minute: .twoDigits):\(second: .twoDigits) UTC",
                timeZone: .gmt, calendar: Calendar(identifier: .gregorian)))
    }

    /// `45 s`, `12 min`, `3 h 5 min`, `2 d 4 h`.
    static func age(since date: Date, now: Date) -> String {
        let seconds = max(0, Int(now.timeIntervalSince(date)))
        switch seconds {
        case ..<60: return "\(seconds) s"
        case ..<3600: return "\(seconds / 60) min"
        case ..<86400: return "\(seconds / 3600) h \(seconds % 3600 / 60) min"
        default: return "\(seconds / 86400) d \(seconds % 86400 / 3600) h"
        }
    }

    /// A query string of the given parameters, the absent ones left out, values percent-encoded.
    static func query(_ parameters: [(String, String?)]) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return parameters.compactMap { name, value in
            value.map { "\(name)=\($0.addingPercentEncoding(withAllowedCharacters: allowed) ?? "")" }
        }.joined(separator: "&")
    }
}

/// A console page's query string: unknown or repeated parameters are refused as the admin API
/// refuses them, but an empty value means "any", since that is what a form's blank choice sends.
struct ConsoleQuery {
    private var values: [String: String] = [:]

    init(_ request: Request, allowed: Set<String>) throws(ConsoleError) {
        for (key, value) in request.uri.queryParameters {
            let name = String(key)
            guard allowed.contains(name) else {
                throw .badRequest("unknown query parameter \(name); expected one of \(allowed.sorted().joined(separator: ", "))")
            }
            guard values[name] == nil else { throw .badRequest("\(name) is given twice") }
            if !value.isEmpty { values[name] = String(value) }
        }
    }

    subscript(_ name: String) -> String? { values[name] }

    func oneOf<Value: RawRepresentable & CaseIterable>(_ name: String, _ type: Value.Type) throws(ConsoleError) -> Value?
    where Value.RawValue == String {
        guard let text = values[name] else { return nil }
        guard let value = Value(rawValue: text) else {
            throw .badRequest("\(name) must be one of \(Value.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return value
    }

    func positiveInteger(_ name: String) throws(ConsoleError) -> Int64? {
        guard let text = values[name] else { return nil }
        guard let number = Int64(text), number > 0 else { throw .badRequest("\(name) must be a positive integer") }
        return number
    }
}
