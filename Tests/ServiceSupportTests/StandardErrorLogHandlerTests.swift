import Testing

@testable import ServiceSupport

/// Every value written to the log is one value on one line, whoever chose its text.
@Suite("Log lines hold no attacker-made lines or fields")
struct StandardErrorLogHandlerTests {
    @Test(arguments: [
        ("plain", "plain"),
        ("two words", #""two words""#),
        ("k=v", #""k=v""#),
        ("line\nforged=1", #""line\nforged=1""#),
        ("cr\r\ttab", #"cr\r\ttab"#),
        ("\u{1B}[31mred", #"\u{1b}[31mred"#),
        ("del\u{7F} c1\u{85}", #""del\u{7f} c1\u{85}""#),
        (#"a "quote""#, #""a \"quote\"""#),
        (#"back\slash"#, #"back\\slash"#),
        ("sep\u{2028}", #"sep\u{2028}"#),
        ("ünïcødé", "ünïcødé"),
    ])
    func valuesAreEscapedAndQuoted(_ raw: String, _ written: String) {
        #expect(StandardErrorLogHandler.loggable(raw) == written)
    }

    @Test func longValuesAreCut() {
        let long = String(repeating: "x", count: 5000)
        let written = StandardErrorLogHandler.loggable(long)
        #expect(written == String(repeating: "x", count: StandardErrorLogHandler.longestValue) + "…")
    }

    @Test func messagesAreEscapedButNotQuoted() {
        #expect(StandardErrorLogHandler.loggable("job failed\nfake", quoting: false) == #"job failed\nfake"#)
    }
}
