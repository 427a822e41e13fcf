/// Device tokens are credentials for reaching a person's phone: logs and listings show only
/// their first 20 characters (half of a token shorter than that), never the whole token.
public func maskedToken(_ token: String) -> String {
    let shown = token.count > 20 ? 20 : token.count / 2
    return String(token.prefix(shown)) + "…"
}
