/// Left-aligned columns for terminal listings, every cell ``printable(_:)``.
enum TextTable {
    static func render(header: [String], rows: [[String]]) -> String {
        let all = ([header] + rows).map { $0.map(printable) }
        let widths = header.indices.map { column in all.map { $0[column].count }.max() ?? 0 }
        return all.map { line($0, widths: widths) }.joined(separator: "\n")
    }

    /// One row padded to `widths`; the last cell is never padded.
    static func line(_ cells: [String], widths: [Int]) -> String {
        cells.map(printable).enumerated().map { index, cell in
            index == cells.count - 1 || index >= widths.count
                ? cell : cell.padding(toLength: max(widths[index], cell.count), withPad: " ", startingAt: 0)
        }.joined(separator: "  ")
    }

    /// `text` on one line within `width` characters (see ``printable(_:)``), a longer text cut
    /// to end in `…`.
    static func clipped(_ text: String, to width: Int) -> String {
        let line = printable(text)
        return line.count <= width ? line : line.prefix(width - 1) + "…"
    }

    /// `text` as one line that shows what it holds and nothing more: line breaks and tabs become
    /// spaces, other control characters (a terminal's escape sequences) and the bidirectional
    /// controls that reorder what follows become U+FFFD. Titles and FCM's errors are other
    /// people's text, and would otherwise forge lines or colours in an operator's terminal.
    /// The embeddings, overrides and isolates, which reorder what follows them; the direction
    /// marks (U+200E, U+200F, U+061C) only nudge neutral characters, and Arabic and Hebrew text
    /// holds them.
    private static let reordering: Set<UInt32> = Set(0x202A...0x202E).union(0x2066...0x2069)

    private static let lineBreaksAndTabs: Set<Unicode.Scalar> = ["\t", "\n", "\u{0B}", "\u{0C}", "\r", "\u{85}", "\u{2028}", "\u{2029}"]

    static func printable(_ text: String) -> String {
        var scalars = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            if Self.lineBreaksAndTabs.contains(scalar) {
                scalars.append(" ")
            } else if scalar.properties.generalCategory == .control || Self.reordering.contains(scalar.value) {
                scalars.append("\u{FFFD}")
            } else {
                scalars.append(scalar)
            }
        }
        return String(scalars)
    }
}
