extension Duration {
    /// Rounded to the millisecond, for a log line: a wait worked out from the clock reads
    /// `1.0 seconds`, not `0.999994943 seconds`.
    var toTheMillisecond: Duration {
        let (seconds, attoseconds) = components
        return .milliseconds(seconds * 1000 + Int64((Double(attoseconds) / 1e15).rounded()))
    }
}
