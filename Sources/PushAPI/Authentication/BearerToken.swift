import Hummingbird

extension Request {
    /// The token of an `Authorization: Bearer …` header; nil when absent, empty or another scheme.
    var bearerToken: String? {
        guard let authorization = headers[.authorization] else { return nil }
        let parts = authorization.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        let token = parts[1].trimmingCharacters(in: .whitespaces)
        return token.isEmpty ? nil : token
    }
}
