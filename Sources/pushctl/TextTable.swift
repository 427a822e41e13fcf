/// Left-aligned columns for terminal listings.
enum TextTable {
    static func render(header: [String], rows: [[String]]) -> String {
        let all = [header] + rows
        let widths = header.indices.map { column in all.map { $0[column].count }.max() ?? 0 }
        return all.map { line($0, widths: widths) }.joined(separator: "\n")
    }

    /// One row padded to `widths`; the last cell is never padded.
    static func line(_ cells: [String], widths: [Int]) -> String {
        cells.enumerated().map { index, cell in
            index == cells.count - 1 || index >= widths.count
                ? cell : cell.padding(toLength: max(widths[index], cell.count), withPad: " ", startingAt: 0)
        }.joined(separator: "  ")
    }

    /// `text` on one line within `width` characters: line breaks and tabs become spaces (they
    /// would break the table), and a longer text is cut to end in `…`.
    static func clipped(_ text: String, to width: Int) -> String {
        let line = String(text.map { $0.isNewline || $0 == "\t" ? " " : $0 })
        return line.count <= width ? line : line.prefix(width - 1) + "…"
    }
}
