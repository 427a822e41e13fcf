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
