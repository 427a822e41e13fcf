import Foundation

/// Splits a migration file into single statements (PostgresNIO speaks only the extended query
/// protocol: one statement per query). Semicolons inside quotes, comments and dollar-quoted
/// bodies (`$$ … $$`, `$fn$ … $fn$`) do not split.
public enum SQLScript {
    public static func statements(_ script: String) -> [String] {
        let text = Array(script.unicodeScalars)
        var statements: [String] = []
        var current = String.UnicodeScalarView()
        var index = 0

        func flush() {
            let statement = String(current).trimmingCharacters(in: .whitespacesAndNewlines)
            if !isOnlyComments(statement) { statements.append(statement) }
            current = String.UnicodeScalarView()
        }
        func copy(until end: Int) {
            current.append(contentsOf: text[index..<min(end, text.count)])
            index = min(end, text.count)
        }
        func find(_ needle: [Unicode.Scalar], from start: Int) -> Int? {
            guard needle.count <= text.count else { return nil }
            var position = start
            while position + needle.count <= text.count {
                if Array(text[position..<position + needle.count]) == needle { return position }
                position += 1
            }
            return nil
        }

        while index < text.count {
            let scalar = text[index]
            let next = index + 1 < text.count ? text[index + 1] : nil
            switch scalar {
            case ";":
                index += 1
                flush()
            case "'", "\"":
                // Quotes escape themselves by doubling, which this loop handles as two strings.
                let close = find([scalar], from: index + 1) ?? text.count - 1
                copy(until: close + 1)
            case "-" where next == "-":
                copy(until: find(["\n"], from: index) ?? text.count)
            case "/" where next == "*":
                copy(until: (find(["*", "/"], from: index + 2) ?? text.count) + 2)
            case "$":
                if let tagEnd = dollarTagEnd(text, from: index) {
                    let tag = Array(text[index...tagEnd])
                    let close = find(tag, from: tagEnd + 1) ?? text.count
                    copy(until: close + tag.count)
                } else {
                    copy(until: index + 1)
                }
            default:
                copy(until: index + 1)
            }
        }
        flush()
        return statements
    }

    /// `$tag$` starts at `start`: returns the index of its closing `$`, or nil for `$1` and the like.
    private static func dollarTagEnd(_ text: [Unicode.Scalar], from start: Int) -> Int? {
        var position = start + 1
        while position < text.count {
            let scalar = text[position]
            if scalar == "$" { return position }
            let isTagCharacter = scalar == "_" || scalar.properties.isAlphabetic || (position > start + 1 && ("0"..."9").contains(scalar))
            guard isTagCharacter else { return nil }
            position += 1
        }
        return nil
    }

    private static func isOnlyComments(_ statement: String) -> Bool {
        statement.split(separator: "\n").allSatisfy { line in
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            return trimmed.isEmpty || trimmed.hasPrefix("--")
        }
    }
}
