import WireFormats

extension String {
    /// The most characters kept of text from outside: an error's code or message, a message
    /// id, a job's failure reason.
    public static let longestStored = 500

    /// This text as a `text` column can hold it, at most `limit` characters. PostgreSQL refuses
    /// the NUL character, and with it the whole statement, every time it is tried again: text
    /// that comes from outside (FCM's or Google's answers, or a proxy's between, whose JSON can
    /// carry `\u0000`) has its NULs written as U+FFFD, as undecodable bytes already are.
    public func storable(upTo limit: Int = longestStored) -> String {
        if utf8.count <= limit && !holdsNUL { return self }
        var scalars = String.UnicodeScalarView()
        for scalar in prefix(limit).unicodeScalars { scalars.append(scalar == "\0" ? "\u{FFFD}" : scalar) }
        return String(scalars)
    }
}
