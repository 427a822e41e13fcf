import Foundation
import Hummingbird
import WireFormats

/// A query string read strictly, by the admin API and the console alike: unknown or repeated
/// parameters and NUL characters are refused, naming the parameter, so a typo (`job_id=`)
/// never widens an audit query to everything. Refusals are `QueryProblem`s, which each surface
/// answers in its own form (the API's JSON envelope, the console's error page).
struct QueryParameters {
    /// What a parameter given with an empty value means.
    enum EmptyValue {
        /// A refusal: `?jobId=` from an unset shell variable must not mean "any job" (the API).
        case refused
        /// Not given: what a form's blank choice sends (the console).
        case meansAny
    }

    private var values: [String: String] = [:]

    init(_ request: Request, allowed: Set<String>, empty: EmptyValue = .refused) throws(QueryProblem) {
        var seen: Set<String> = []
        for (key, value) in request.uri.queryParameters {
            let name = String(key)
            guard allowed.contains(name) else { throw .unknown(name, allowed: allowed.sorted()) }
            guard seen.insert(name).inserted else { throw .repeated(name) }
            guard !value.holdsNUL else { throw .nul(name) }
            if value.isEmpty {
                if empty == .refused { throw .empty(name) }
                continue
            }
            values[name] = String(value)
        }
    }

    func string(_ name: String) -> String? {
        values[name]
    }

    func integer(_ name: String, in range: ClosedRange<Int64>, message: String? = nil) throws(QueryProblem) -> Int64? {
        guard let text = string(name) else { return nil }
        guard let number = Int64(plainDecimal: text), range.contains(number) else {
            throw .invalid(name, message ?? "\(name) must be an integer in \(range.lowerBound)...\(range.upperBound)")
        }
        return number
    }

    /// An id: a job's, a user's, a keyset cursor's.
    func positiveInteger(_ name: String) throws(QueryProblem) -> Int64? {
        try integer(name, in: 1...Int64.max, message: "\(name) must be a positive integer")
    }

    func oneOf<Value: RawRepresentable<String> & CaseIterable>(_ name: String, _ type: Value.Type) throws(QueryProblem) -> Value? {
        guard let text = string(name) else { return nil }
        guard let value = Value(rawValue: text) else {
            throw .invalid(name, "\(name) must be one of \(Value.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return value
    }

    /// ISO 8601 with a zone, as in JSON bodies.
    func time(_ name: String) throws(QueryProblem) -> Date? {
        guard let text = string(name) else { return nil }
        do { return try ISO8601Time.parse(text, field: name) } catch { throw .invalid(name, "\(error)") }
    }
}

/// Why a query string was refused; `description` is the message either surface shows.
enum QueryProblem: Error, Equatable, CustomStringConvertible {
    case unknown(String, allowed: [String])
    case repeated(String)
    case empty(String)
    case nul(String)
    /// A value the parameter cannot take, with the message saying which it can.
    case invalid(String, String)

    var description: String {
        switch self {
        case .unknown(let name, let allowed): "unknown query parameter \(name); expected one of \(allowed.joined(separator: ", "))"
        case .repeated(let name): "\(name) is given twice"
        case .empty(let name): "\(name) is empty; leave it out to not filter"
        case .nul(let name): "\(name) must not contain NUL characters"
        case .invalid(_, let message): message
        }
    }
}
