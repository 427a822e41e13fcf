import Foundation
import PushAPI
import PushDispatch
import Testing
import TestSupport

/// What the programs read is what their --help and the README's configuration table say.
@Suite struct ConfigurationDocsTests {
    @Test(arguments: [("push-api", APIConfiguration.environmentVariables), ("push-worker", DispatchConfiguration.environmentVariables)])
    func everyVariableIsInTheHelpAndTheReadme(program: String, variables: Set<String>) async throws {
        let help = try await BuiltProduct(program).run(["--help"])
        #expect(help.status == 0)
        let readme = try String(contentsOf: repositoryRoot.appendingPathComponent("README.md"), encoding: .utf8)
        let table = readme.split(separator: "\n").filter { $0.hasPrefix("| `") }.joined(separator: "\n")
        for variable in variables.sorted() {
            #expect(help.stdout.contains(variable), "\(program) --help does not name \(variable)")
            #expect(table.contains("`\(variable)`"), "the README's configuration table does not name \(variable)")
        }
    }
}

private let repositoryRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
