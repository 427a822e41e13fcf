import Foundation
import WireFormats

extension JSONParser {
    /// `bytes` as a JSON object whose members named in `strings`, `integers` and `numbers` are
    /// each absent, null or of that kind; nil for anything else. What the emulator reads (its
    /// admin requests, service-account files, assertions) is refused whole when a member it
    /// knows has the wrong kind, as Google's front ends refuse it.
    static func object(_ bytes: Data, strings: [String] = [], integers: [String] = [], numbers: [String] = []) -> [String: JSONValue]? {
        guard let members = (try? parse(bytes))?.members else { return nil }
        func fit(_ names: [String], _ kind: (JSONValue) -> Bool) -> Bool {
            names.allSatisfy { name in members[name].map { $0 == .null || kind($0) } ?? true }
        }
        guard fit(strings, { $0.string != nil }), fit(integers, { $0.integer != nil }), fit(numbers, { $0.seconds != nil }) else {
            return nil
        }
        return members
    }
}
