import Foundation
import PushAPI
import PushDispatch
import Testing
import Yams

/// The files under deploy/ parse, and every environment variable they set is one that the program
/// it reaches actually reads.
@Suite struct DeployFileTests {
    @Test func everyYAMLFileParsesAndIsNotEmpty() throws {
        let files = try deployFiles { ["yml", "yaml"].contains($0.pathExtension) }
        #expect(files.count >= 7, "docker-compose.yml and the Kubernetes manifests")
        for file in files {
            let documents = try yamlDocuments(file)
            #expect(!documents.isEmpty, "\(relativePath(file)) has no YAML document")
            for document in documents {
                #expect(mapping(document)?.isEmpty == false, "\(relativePath(file)): a document that is not a non-empty mapping")
            }
        }
    }

    /// Every file under deploy/ is one the tests here read (or one that sets no variables): a new
    /// kind of file must be added here, with a check when it sets variables.
    @Test func everyDeployFileIsKnown() throws {
        let unknown = try deployFiles { _ in true }.map(relativePath).filter { path in
            let known = [
                "deploy/Dockerfile", "deploy/docker-compose.yml", "deploy/compose.env.example", "deploy/README.md",
                "deploy/.gitignore",
            ]
            let local = path == "deploy/.env"  // git-ignored
            let kubernetes = path.hasPrefix("deploy/kubernetes/") && path.hasSuffix(".yaml")
            let systemd = path.hasPrefix("deploy/systemd/") && [".service", ".timer", ".env.example"].contains { path.hasSuffix($0) }
            return !(known.contains(path) || local || kubernetes || systemd)
        }
        #expect(unknown.isEmpty, "no test reads these: \(unknown)")
    }

    @Test func kustomizationListsEveryManifestButTheSecretExample() throws {
        let kustomization = try #require(try yamlDocuments(deployFolder.appendingPathComponent("kubernetes/kustomization.yaml")).first)
        let resources = Set(sequence(value(kustomization, "resources")).compactMap { $0 as? String })
        let manifests = try deployFiles { relativePath($0).hasPrefix("deploy/kubernetes/") }.map(\.lastPathComponent)
        #expect(resources == Set(manifests).subtracting(["kustomization.yaml", "secret.example.yaml"]))
    }

    @Test func everySystemdUnitParses() throws {
        let units = try systemdUnits()
        #expect(units.count >= 5)
        for unit in units {
            #expect(!unit.values("Unit", "Description").isEmpty, "\(unit.name) has no Description")
            if unit.name.hasSuffix(".service") {
                #expect(!unit.values("Service", "ExecStart").isEmpty, "\(unit.name) has no ExecStart")
            } else if unit.name.hasSuffix(".timer") {
                #expect(!unit.values("Timer", "OnCalendar").isEmpty, "\(unit.name) has no OnCalendar")
                let service = unit.name.replacingOccurrences(of: ".timer", with: ".service")
                #expect(units.contains { $0.name == service }, "\(unit.name) starts \(service), which is missing")
            }
        }
    }

    @Test func dockerfileIsMultiStageAndRunsAsAnUnprivilegedUser() throws {
        let dockerfile = try Dockerfile(contentsOf: deployFolder.appendingPathComponent("Dockerfile"))
        let stages = dockerfile.instructions.filter { $0.keyword == "FROM" }.map { words($0.arguments) }
        #expect(stages.count >= 2)
        let stageNames = stages.map { $0.count >= 3 && $0[$0.count - 2].uppercased() == "AS" ? $0.last : nil }
        var stage = -1
        var user: String?
        for instruction in dockerfile.instructions {
            switch instruction.keyword {
            case "FROM":
                stage += 1
                user = nil
            case "USER":
                user = instruction.arguments
            case "COPY":
                for source in words(instruction.arguments).filter({ $0.hasPrefix("--from=") }).map({ String($0.dropFirst(7)) }) {
                    let earlier =
                        stageNames.prefix(max(stage, 0)).contains(source) || Int(source).map { (0..<max(stage, 0)).contains($0) } == true
                    #expect(earlier, "COPY --from=\(source) does not name an earlier stage")
                }
            default:
                break
            }
        }
        let finalUser = try #require(user, "the final stage has no USER: it would run as root")
        #expect(!["root", "0"].contains(finalUser.split(separator: ":").first.map(String.init) ?? ""), "USER \(finalUser)")
    }

    /// Each place that sets variables (a compose service, a Kubernetes container, a systemd unit, an
    /// env example, the image) sets only variables that one of the programs running there reads.
    @Test func everyVariableIsReadByTheProgramItReaches() throws {
        let places = try composePlaces() + kubernetesPlaces() + systemdPlaces() + dockerfilePlaces()
        for place in places {
            guard let programs = place.programs ?? owners[place.name] else {
                Issue.record("\(place.name) is not in `owners`: say which program(s) it configures")
                continue
            }
            for variable in place.variables where !programs.contains(where: { $0.environmentVariables.contains(variable) }) {
                Issue.record(
                    "\(place.name) sets \(variable), which \(programs.map(\.rawValue).sorted().joined(separator: "/")) never reads")
            }
            if let command = place.command {
                let tokens = command.split { $0.isWhitespace || $0 == "'" || $0 == "\"" }
                let named = Set(tokens.compactMap { Program(rawValue: String($0.split(separator: "/").last ?? "")) })
                #expect(
                    !named.isEmpty && named.isSubset(of: programs),
                    "\(place.name) runs `\(command)`, not \(programs.map(\.rawValue).sorted())")
            }
        }
        let checked = Set(places.map(\.name))
        #expect(checked.isSuperset(of: owners.keys), "stale `owners` entries: \(Set(owners.keys).subtracting(checked).sorted())")
    }

    /// docker-compose.yml takes its settings from deploy/.env: compose.env.example names exactly the
    /// variables it substitutes, and leaves none of the required (`${NAME:?…}`) ones commented out.
    @Test func composeEnvExampleMatchesTheInterpolations() throws {
        let compose = try String(contentsOf: deployFolder.appendingPathComponent("docker-compose.yml"), encoding: .utf8)
        var referenced: Set<String> = []
        var required: Set<String> = []
        for match in compose.matches(of: #/\$\{([A-Za-z_][A-Za-z0-9_]*)(:?\?)?/#) {
            referenced.insert(String(match.output.1))
            if match.output.2 != nil { required.insert(String(match.output.1)) }
        }
        let example = try envExampleAssignments(deployFolder.appendingPathComponent("compose.env.example"))
        #expect(Set(example.map(\.name)) == referenced)
        let active = Set(example.filter { !$0.commented }.map(\.name))
        #expect(required.isSubset(of: active), "commented out in compose.env.example: \(required.subtracting(active).sorted())")
    }

    /// On SIGTERM push-worker stops claiming, lets in-flight sends finish and records them, for
    /// at most its drain bound, then stops within the cancellation bound whatever the database
    /// and FCM do: every supervisor must wait that long before killing it.
    @Test func workerGetsItsDrainBoundToStop() throws {
        let configuration = DispatchConfiguration(databaseURL: "")
        let drainBound = Double((configuration.drainBound + DispatchConfiguration.cancellationBound).components.seconds)
        #expect(drainBound == 90)
        let compose = try #require(try yamlDocuments(deployFolder.appendingPathComponent("docker-compose.yml")).first)
        let grace = try #require(value(compose, "services", "push-worker", "stop_grace_period") as? String)
        #expect(seconds(grace).map { $0 >= drainBound } == true, "compose push-worker: stop_grace_period \(grace)")

        let unit = try #require(try systemdUnits().first(where: { $0.name == "push-worker.service" }))
        let timeout = try #require(unit.values("Service", "TimeoutStopSec").last, "push-worker.service: no TimeoutStopSec")
        #expect(seconds(timeout).map { $0 >= drainBound } == true, "push-worker.service: TimeoutStopSec=\(timeout)")

        let worker = try #require(
            try kubernetesDocuments().first(where: {
                $0["kind"] as? String == "Deployment" && value($0, "metadata", "name") as? String == "push-worker"
            }))
        let period = try #require(value(worker, "spec", "template", "spec", "terminationGracePeriodSeconds") as? Int)
        #expect(Double(period) >= drainBound, "push-worker Deployment: terminationGracePeriodSeconds \(period)")
    }
}

// MARK: - Who reads what

/// The programs a deploy file configures, and the environment variables each one reads.
private enum Program: String, CaseIterable {
    case api = "push-api"
    case worker = "push-worker"
    case pushctl
    case emulator = "fcm-emulator"
    /// The official postgres image, in docker-compose.yml.
    case postgres

    var environmentVariables: Set<String> {
        switch self {
        case .api: APIConfiguration.environmentVariables
        case .worker: DispatchConfiguration.environmentVariables
        case .pushctl: ["DATABASE_URL", "LOG_LEVEL"]
        case .emulator: []  // command-line flags only
        case .postgres: ["POSTGRES_USER", "POSTGRES_PASSWORD", "POSTGRES_DB"]
        }
    }
}

/// Which program(s) each place runs. A place missing here fails the test: add the compose service,
/// Kubernetes container or systemd unit you create, with what it runs.
private let owners: [String: Set<Program>] = [
    "compose postgres": [.postgres],
    "compose migrate": [.pushctl],
    "compose push-api": [.api],
    "compose push-worker": [.worker],
    "compose fcm-emulator": [.emulator],
    "compose demo-app": [.pushctl],
    "kubernetes Job/push-migrate migrate": [.pushctl],
    "kubernetes Deployment/push-api push-api": [.api],
    "kubernetes Deployment/push-worker push-worker": [.worker],
    "kubernetes Deployment/push-api migrate": [.pushctl],
    "kubernetes Deployment/push-worker migrate": [.pushctl],
    "kubernetes CronJob/push-daily-digest daily-digest": [.pushctl],
    "systemd push-migrate.service": [.pushctl],
    "systemd push-api.service": [.api],
    "systemd push-worker.service": [.worker],
    "systemd push-daily-digest.service": [.pushctl],
    // One image runs every program.
    "Dockerfile": [.api, .worker, .pushctl, .emulator],
]

/// Variables set in one place; `programs` overrides `owners` where they follow from the files.
private struct Place {
    var name: String
    var variables: [String]
    var command: String? = nil
    var programs: Set<Program>? = nil
}

private func composePlaces() throws -> [Place] {
    let compose = try #require(try yamlDocuments(deployFolder.appendingPathComponent("docker-compose.yml")).first)
    let services = try #require(mapping(value(compose, "services")))
    return services.map { name, service in
        #expect(value(service, "env_file") == nil, "compose \(name): env_file cannot be checked; use environment")
        let environment = value(service, "environment")
        let variables =
            mapping(environment).map { Array($0.keys) }
            ?? sequence(environment).compactMap { ($0 as? String)?.split(separator: "=").first.map(String.init) }
        let command =
            (value(service, "command") as? String)
            ?? sequence(value(service, "command")).compactMap { $0 as? String }.joined(separator: " ")
        return Place(name: "compose \(name)", variables: variables, command: command.isEmpty ? nil : command)
    }
}

private func kubernetesPlaces() throws -> [Place] {
    let secretKeys = try Set(
        yamlDocuments(deployFolder.appendingPathComponent("kubernetes/secret.example.yaml"))
            .flatMap { mapping(value($0, "stringData")).map { Array($0.keys) } ?? [] })
    var places: [Place] = []
    for document in try kubernetesDocuments() {
        let kind = document["kind"] as? String ?? "?"
        let podPath: [String]? =
            switch kind {
            case "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job": ["spec", "template", "spec"]
            case "CronJob": ["spec", "jobTemplate", "spec", "template", "spec"]
            case "Pod": ["spec"]
            default: nil
            }
        guard let podPath, let pod = mapping(value(document, podPath)) else { continue }
        let object = "\(kind)/\(value(document, "metadata", "name") as? String ?? "?")"
        for container in (sequence(pod["initContainers"]) + sequence(pod["containers"])).compactMap(mapping) {
            let name = "kubernetes \(object) \(container["name"] as? String ?? "?")"
            #expect(container["envFrom"] == nil, "\(name): envFrom cannot be checked; use env")
            let env = sequence(container["env"]).compactMap(mapping)
            for reference in env.compactMap({ mapping(value($0, "valueFrom", "secretKeyRef")) }) {
                let key = reference["key"] as? String ?? "?"
                #expect(
                    reference["name"] as? String == "push-secrets" && secretKeys.contains(key),
                    "\(name) reads \(key) of a Secret that secret.example.yaml does not describe")
            }
            let command = (sequence(container["command"]) + sequence(container["args"])).compactMap { $0 as? String }.joined(separator: " ")
            places.append(Place(name: name, variables: env.compactMap { $0["name"] as? String }, command: command.isEmpty ? nil : command))
        }
    }
    return places
}

private func systemdPlaces() throws -> [Place] {
    let units = try systemdUnits()
    var places = units.filter { $0.name.hasSuffix(".service") }.map { unit in
        Place(
            name: "systemd \(unit.name)", variables: unit.values("Service", "Environment").flatMap(words).compactMap(variableName),
            command: unit.values("Service", "ExecStart").first)
    }
    // An example of an EnvironmentFile= serves every unit that reads that file: each of its variables
    // must be read by at least one of their programs.
    for example in try deployFiles({ $0.lastPathComponent.hasSuffix(".env.example") && relativePath($0).hasPrefix("deploy/systemd/") }) {
        let installed = String(example.lastPathComponent.dropLast(".example".count))
        let readers = units.filter { unit in
            unit.values("Service", "EnvironmentFile").contains {
                ($0.hasPrefix("-") ? String($0.dropFirst()) : $0).hasSuffix("/" + installed)
            }
        }
        #expect(!readers.isEmpty, "no unit reads \(installed)")
        let programs = readers.reduce(into: Set<Program>()) { $0.formUnion(owners["systemd \($1.name)"] ?? []) }
        places.append(
            Place(
                name: "systemd \(example.lastPathComponent)", variables: try envExampleAssignments(example).map(\.name), programs: programs)
        )
    }
    return places
}

private func dockerfilePlaces() throws -> [Place] {
    let dockerfile = try Dockerfile(contentsOf: deployFolder.appendingPathComponent("Dockerfile"))
    let variables = dockerfile.instructions.filter { $0.keyword == "ENV" }.flatMap { instruction in
        let arguments = words(instruction.arguments)
        // `ENV NAME=value …`, or the legacy `ENV NAME value`.
        return arguments.first?.contains("=") == true ? arguments.compactMap(variableName) : Array(arguments.prefix(1))
    }
    return [Place(name: "Dockerfile", variables: variables)]
}

// MARK: - Reading the files

private let deployFolder = repositoryRoot.appendingPathComponent("deploy")

private func relativePath(_ file: URL) -> String {
    String(file.standardizedFileURL.path.dropFirst(repositoryRoot.standardizedFileURL.path.count + 1))
}

/// The regular files under deploy/ that match, in a stable order.
private func deployFiles(_ isIncluded: (URL) -> Bool) throws -> [URL] {
    let enumerator = try #require(FileManager.default.enumerator(at: deployFolder, includingPropertiesForKeys: [.isRegularFileKey]))
    return enumerator.compactMap { $0 as? URL }
        .filter { (try? $0.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true && isIncluded($0) }
        .sorted { $0.path < $1.path }
}

/// Every document of a YAML file as Yams loads it (merge keys applied); a syntax error throws.
private func yamlDocuments(_ file: URL) throws -> [Any] {
    var loader = try Yams.load_all(yaml: String(contentsOf: file, encoding: .utf8))
    var documents: [Any] = []
    while let document = loader.next() { documents.append(document) }
    if let error = loader.error { throw error }  // load_all stops at a syntax error without throwing
    return documents
}

private func kubernetesDocuments() throws -> [[String: Any]] {
    try deployFiles { $0.pathExtension == "yaml" && relativePath($0).hasPrefix("deploy/kubernetes/") }.flatMap(yamlDocuments).compactMap(
        mapping)
}

/// A YAML mapping with string keys (Yams loads mappings as `[AnyHashable: Any]`).
private func mapping(_ node: Any?) -> [String: Any]? {
    guard let dictionary = node as? [AnyHashable: Any] else { return nil }
    return Dictionary(uniqueKeysWithValues: dictionary.compactMap { key, value in (key.base as? String).map { ($0, value) } })
}

private func sequence(_ node: Any?) -> [Any] { node as? [Any] ?? [] }

private func value(_ node: Any?, _ path: String...) -> Any? { value(node, path) }

private func value(_ node: Any?, _ path: [String]) -> Any? { path.reduce(node) { mapping($0)?[$1] } }

/// Shell-like words: split at blanks outside quotes, quotes removed.
private func words(_ text: String) -> [String] {
    var words: [String] = []
    var word = ""
    var quote: Character?
    var inWord = false
    for character in text {
        if let open = quote {
            if character == open { quote = nil } else { word.append(character) }
        } else if character == "\"" || character == "'" {
            quote = character
            inWord = true
        } else if character.isWhitespace {
            if inWord { words.append(word) }
            word = ""
            inWord = false
        } else {
            word.append(character)
            inWord = true
        }
    }
    if inWord { words.append(word) }
    return words
}

/// `NAME` of a `NAME=value` word.
private func variableName(_ assignment: String) -> String? {
    let name = assignment.prefix { $0 != "=" }
    return name.count < assignment.count && !name.isEmpty ? String(name) : nil
}

/// The variables an env example assigns, commented-out ones (`#NAME=value`) included.
private func envExampleAssignments(_ file: URL) throws -> [(name: String, commented: Bool)] {
    try String(contentsOf: file, encoding: .utf8).split(separator: "\n").compactMap { line in
        let commented = line.hasPrefix("#")
        let body = commented ? line.dropFirst().drop(while: \.isWhitespace) : line[...]
        let name = body.prefix { $0.isUppercase || $0.isNumber || $0 == "_" }
        guard name.first?.isLetter == true, body.dropFirst(name.count).first == "=" else { return nil }
        return (String(name), commented)
    }
}

/// Seconds in a duration as compose (`30s`, `1m30s`) or systemd (`30`, `1min 30s`) writes it.
private func seconds(_ text: String) -> Double? {
    let units: [String: Double] = ["": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "ms": 0.001]
    var total: Double?
    for match in text.matches(of: #/(\d+(?:\.\d+)?)\s*([a-z]*)/#) {
        guard let number = Double(match.output.1), let unit = units[String(match.output.2)] else { return nil }
        total = (total ?? 0) + number * unit
    }
    return total
}

private func systemdUnits() throws -> [UnitFile] {
    try deployFiles { ["service", "timer"].contains($0.pathExtension) }.map(UnitFile.init)
}

/// A systemd unit file: section → key → values, in order. Anything but blank lines, comments,
/// known `[Section]` headers and `Key=Value` lines inside a section is an error.
private struct UnitFile {
    struct SyntaxError: Error, CustomStringConvertible {
        let description: String
    }

    static let sections: Set<String> = ["Unit", "Service", "Timer", "Install"]

    let name: String
    private var settings: [String: [String: [String]]] = [:]

    init(contentsOf file: URL) throws {
        name = file.lastPathComponent
        var section: String?
        var pending = ""
        for (index, rawLine) in try String(contentsOf: file, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
            .enumerated()
        {
            var line = rawLine.trimmingCharacters(in: .whitespaces)
            if line.hasPrefix("#") || line.hasPrefix(";") { continue }
            line = pending + line
            if line.hasSuffix("\\") {
                pending = String(line.dropLast()) + " "
                continue
            }
            pending = ""
            if line.isEmpty { continue }
            if line.hasPrefix("["), line.hasSuffix("]") {
                let header = String(line.dropFirst().dropLast())
                guard Self.sections.contains(header) else {
                    throw SyntaxError(description: "\(name):\(index + 1): unknown section [\(header)]")
                }
                section = header
                continue
            }
            let key = line.prefix { $0 != "=" }.trimmingCharacters(in: .whitespaces)
            guard let section, line.contains("="), !key.isEmpty, key.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" }) else {
                throw SyntaxError(description: "\(name):\(index + 1): not a Key=Value setting inside a section: \(line)")
            }
            let value = line.drop { $0 != "=" }.dropFirst().trimmingCharacters(in: .whitespaces)
            settings[section, default: [:]][key, default: []].append(value)
        }
        guard pending.isEmpty else { throw SyntaxError(description: "\(name): ends inside a continued line") }
    }

    func values(_ section: String, _ key: String) -> [String] { settings[section]?[key] ?? [] }
}

/// A Dockerfile's instructions, continuation lines joined and comments dropped.
private struct Dockerfile {
    struct Instruction {
        let keyword: String
        let arguments: String
    }

    let instructions: [Instruction]

    init(contentsOf file: URL) throws {
        var instructions: [Instruction] = []
        var pending = ""
        for rawLine in try String(contentsOf: file, encoding: .utf8).split(separator: "\n") {
            let line = rawLine.trimmingCharacters(in: .whitespaces)
            if line.hasPrefix("#") { continue }
            pending += line
            if pending.hasSuffix("\\") {
                pending = String(pending.dropLast()) + " "
                continue
            }
            let keyword = pending.prefix { !$0.isWhitespace }
            if !keyword.isEmpty {
                instructions.append(
                    Instruction(
                        keyword: keyword.uppercased(), arguments: pending.dropFirst(keyword.count).trimmingCharacters(in: .whitespaces)))
            }
            pending = ""
        }
        self.instructions = instructions
    }
}
