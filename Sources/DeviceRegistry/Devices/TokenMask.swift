/// Device tokens are credentials for reaching a person's phone: logs and listings show only the
/// start of one, never the whole token.
///
/// The rule: a token of n characters shows its first min(20, ⌊n/2⌋) characters, then `…`; that
/// is, at most 20 characters and never more than half of the token. 40 or more characters show
/// 20, 21 show 10, 3 show 1, and 1 or none show only `…`.
public func maskedToken(_ token: String) -> String {
    String(token.prefix(min(20, token.count / 2))) + "…"
}
