extension Duration {
    /// The duration in seconds, fractions included: what SQL intervals and `TimeInterval` take.
    public var inSeconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
