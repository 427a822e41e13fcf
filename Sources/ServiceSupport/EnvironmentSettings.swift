import Logging

/// Why a setting from the environment cannot be used; one line for the operator.
public enum ConfigurationError: Error, CustomStringConvertible, Equatable {
    case missing(String)
    case invalid(String, String)

    public var description: String {
        switch self {
        case .missing(let name): "\(name) is required"
        case .invalid(let name, let reason): "\(name): \(reason)"
        }
    }
}

/// Reads the programs' settings from environment variables; an empty value counts as unset.
/// A program declares every name it reads, and reading an undeclared one traps: the declared
/// list is what the help text, docs/operating.md and the deploy files are checked against.
public struct EnvironmentSettings: Sendable {
    let values: [String: String]
    let declared: Set<String>

    public init(_ values: [String: String], declared: Set<String>) {
        self.values = values
        self.declared = declared
    }

    public func value(_ name: String) -> String? {
        precondition(declared.contains(name), "\(name) is read but not declared")
        guard let value = values[name], !value.isEmpty else { return nil }
        return value
    }

    public func required(_ name: String) throws(ConfigurationError) -> String {
        guard let value = value(name) else { throw .missing(name) }
        return value
    }

    public func integer(_ name: String, in range: ClosedRange<Int>) throws(ConfigurationError) -> Int? {
        guard let text = value(name) else { return nil }
        guard let number = Int(text), range.contains(number) else {
            throw .invalid(name, "'\(text)' is not an integer in \(range.lowerBound)...\(range.upperBound)")
        }
        return number
    }

    /// LOG_LEVEL, when set.
    public func logLevel() throws(ConfigurationError) -> Logger.Level? {
        guard let text = value("LOG_LEVEL") else { return nil }
        guard let level = Logger.Level(rawValue: text.lowercased()) else {
            throw .invalid("LOG_LEVEL", "'\(text)' is not one of trace, debug, info, notice, warning, error, critical")
        }
        return level
    }
}
