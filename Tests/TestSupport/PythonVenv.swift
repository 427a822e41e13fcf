import Foundation

/// A throwaway Python venv in a temporary folder with packages installed from PyPI, for tests
/// that run a third party's Python tool (firebase-admin, schemathesis). A suite makes it once
/// (a `static let` Task) and is skipped, saying so, only when pip cannot reach the index; any
/// other failure (no python3, no venv module, a package that does not install) fails the test.
public enum PythonVenv {
    public struct Installation: Sendable {
        /// The venv's folder, removed by the test that uses it (`remove()`).
        public var folder: String
        /// The venv's `bin` folder, or why there is none.
        public var bin: Result<String, InstallationFailure>

        public var pypiUnreachable: Bool {
            if case .failure(let failure) = bin { failure.pypiUnreachable } else { false }
        }

        /// A program of the venv (`python`, or a package's command such as `schemathesis`).
        public func executable(_ name: String) throws(InstallationFailure) -> String {
            try bin.get() + "/" + name
        }

        public func remove() {
            try? FileManager.default.removeItem(atPath: folder)
        }
    }

    public struct InstallationFailure: Error, CustomStringConvertible {
        public var step: String
        public var output: String
        public var pypiUnreachable: Bool
        public var description: String { "\(step) failed:\n\(output)" }
    }

    /// `python3 -m venv` in a fresh temporary folder named after `name`, then `pip install
    /// requirements` into it (scripts/test installs python3-venv and pip when missing).
    public static func install(_ requirements: [String], name: String) async -> Installation {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("\(name)-venv-\(UUID().uuidString)").path
        let installation = { (bin: Result<String, InstallationFailure>) in Installation(folder: folder, bin: bin) }
        do {
            let venv = try await Subprocess.run("/usr/bin/env", ["python3", "-m", "venv", folder], timeLimit: .seconds(120))
            guard venv.status == 0 else {
                try? FileManager.default.removeItem(atPath: folder)
                return installation(
                    .failure(
                        InstallationFailure(
                            step: "python3 -m venv (scripts/test installs python3-venv)", output: venv.output, pypiUnreachable: false)))
            }
            let pip = try await Subprocess.run(
                folder + "/bin/pip", ["install", "--quiet", "--retries", "2", "--timeout", "30"] + requirements,
                timeLimit: .seconds(600))
            guard pip.status == 0 else {
                let step = "pip install \(requirements.joined(separator: " "))"
                let unreachable = pypiUnreachableMarkers.contains { pip.output.contains($0) }
                print("\(step) failed:\n\(pip.output)")
                try? FileManager.default.removeItem(atPath: folder)
                return installation(.failure(InstallationFailure(step: step, output: pip.output, pypiUnreachable: unreachable)))
            }
            return installation(.success(folder + "/bin"))
        } catch {
            return installation(.failure(InstallationFailure(step: "starting python3", output: "\(error)", pypiUnreachable: false)))
        }
    }

    /// What pip prints when it cannot reach the index, as opposed to any other failure.
    public static let pypiUnreachableMarkers = [
        "Failed to establish a new connection", "Temporary failure in name resolution", "Name or service not known",
        "Network is unreachable", "Connection refused", "ConnectTimeoutError", "Read timed out", "ProxyError",
        "(from versions: none)",
    ]
}
