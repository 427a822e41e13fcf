import Foundation
import Testing

/// A user clones this repository alone: no relative link in its documents may leave it, and each
/// one finds its file and, when it names one, the heading.
@Suite struct DocumentLinksTests {
    @Test func theDocumentsAreFound() throws {
        let documents = try markdownDocuments()
        for expected in ["README.md", "docs/contract.md", "deploy/README.md", "bench/fanout/README.md"] {
            #expect(documents.contains(expected), "\(expected) is not among the documents checked")
        }
    }

    @Test(arguments: try markdownDocuments())
    func linksStayInTheRepositoryAndResolve(document: String) throws {
        let source = repositoryRoot.appendingPathComponent(document)
        let text = try String(contentsOf: source, encoding: .utf8)
        for link in markdownLinks(in: text) where !link.contains("://") && !link.hasPrefix("mailto:") {
            let parts = link.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
            let target = parts[0].isEmpty ? source : source.deletingLastPathComponent().appendingPathComponent(parts[0]).standardized
            guard target.path.hasPrefix(repositoryRoot.standardized.path + "/") else {
                Issue.record("\(document) links to \(link), outside the repository")
                continue
            }
            var isFolder: ObjCBool = false
            guard FileManager.default.fileExists(atPath: target.path, isDirectory: &isFolder) else {
                Issue.record("\(document) links to \(link): \(target.path) does not exist")
                continue
            }
            guard parts.count == 2, !isFolder.boolValue else { continue }
            let targetText = try String(contentsOf: target, encoding: .utf8)
            if !headings(in: targetText).map(headingAnchor).contains(parts[1]) {
                Issue.record("\(document) links to \(link): \(parts[0].isEmpty ? document : parts[0]) has no heading #\(parts[1])")
            }
        }
    }
}
