import Foundation

/// The repository's root (this file is Tests/DeployTests/MarkdownDocuments.swift).
let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

/// Every Markdown document a user reads, relative to the root: the tracked `.md` files, not
/// what builds, benchmarks and `scripts/run` leave in `.build`, `bench/out` and `.data`.
func markdownDocuments() throws -> [String] {
    let skipped: Set<String> = [".build", ".data", ".git", "bench/out", ".swiftpm"]
    guard let files = FileManager.default.enumerator(at: repositoryRoot, includingPropertiesForKeys: nil) else { return [] }
    var documents: [String] = []
    for case let file as URL in files {
        let path = String(file.standardizedFileURL.path.dropFirst(repositoryRoot.standardizedFileURL.path.count + 1))
        if skipped.contains(path) {
            files.skipDescendants()
            continue
        }
        if path.hasSuffix(".md") { documents.append(path) }
    }
    return documents.sorted()
}

/// The lines of a Markdown text outside its fenced code blocks (where `#` starts a comment).
func outsideCodeBlocks(_ text: String) -> [String] {
    var inCode = false
    return text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init).filter { line in
        if line.trimmingCharacters(in: .whitespaces).hasPrefix("```") {
            inCode.toggle()
            return false
        }
        return !inCode
    }
}

/// The targets of a Markdown text's inline links, outside code blocks.
func markdownLinks(in text: String) -> [String] {
    outsideCodeBlocks(text).flatMap { matches(of: #"\]\(([^)\s]+)\)"#, in: $0) }
}

/// The first capture group of every match.
func matches(of pattern: String, in text: String) -> [String] {
    let expression = try! NSRegularExpression(pattern: pattern)
    return expression.matches(in: text, range: NSRange(text.startIndex..., in: text)).compactMap { match in
        Range(match.range(at: 1), in: text).map { String(text[$0]) }
    }
}

func headings(in text: String) -> [String] {
    outsideCodeBlocks(text).filter { $0.hasPrefix("#") }.map(headingTitle)
}

func headingTitle(_ line: String) -> String {
    line.drop { $0 == "#" }.trimmingCharacters(in: .whitespaces)
}

/// GitHub's anchor for a heading: lowercased, punctuation but `-` and `_` dropped, spaces as `-`.
func headingAnchor(_ title: String) -> String {
    String(title.lowercased().compactMap { $0 == " " ? "-" : ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" ? $0 : nil) })
}
