import Foundation

/// Decodes an `application/x-www-form-urlencoded` body (the OAuth token request).
enum FormURLEncoded {
    static func decode(_ body: String) -> [String: String] {
        var fields: [String: String] = [:]
        for pair in body.split(separator: "&", omittingEmptySubsequences: true) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let name = percentDecoded(parts[0]) else { continue }
            let value = parts.count > 1 ? percentDecoded(parts[1]) : ""
            // First occurrence wins; a duplicate parameter is not something a real client sends.
            if fields[name] == nil, let value { fields[name] = value }
        }
        return fields
    }

    private static func percentDecoded(_ text: Substring) -> String? {
        text.replacingOccurrences(of: "+", with: " ").removingPercentEncoding
    }
}
