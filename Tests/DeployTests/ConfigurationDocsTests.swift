import Foundation
import PushAPI
import PushDispatch
import TestSupport
import Testing

/// What the programs read is what their --help and the configuration table in docs/operating.md say.
@Suite struct ConfigurationDocsTests {
    @Test(arguments: [("push-api", APIConfiguration.environmentVariables), ("push-worker", DispatchConfiguration.environmentVariables)])
    func everyVariableIsInTheHelpAndTheOperatingGuide(program: String, variables: Set<String>) async throws {
        let help = try await BuiltProduct(program).run(["--help"])
        #expect(help.status == 0)
        let guide = try String(contentsOf: repositoryRoot.appendingPathComponent("docs/operating.md"), encoding: .utf8)
        let table = guide.split(separator: "\n").filter { $0.hasPrefix("| `") }.joined(separator: "\n")
        for variable in variables.sorted() {
            #expect(help.stdout.contains(variable), "\(program) --help does not name \(variable)")
            #expect(table.contains("`\(variable)`"), "docs/operating.md's configuration table does not name \(variable)")
        }
    }
}
