import Foundation
import Testing
import WireFormats

@Suite("JSON values")
struct JSONValueTests {
    @Test func theFirstStringOrNameHoldingNULIsNamedByItsPath() throws {
        func path(_ json: String) throws -> String? {
            try JSONParser.parse(Data(json.utf8)).pathHoldingNUL(from: "message")
        }
        #expect(try path(#"{"notification":{"title":"a\u0000b"}}"#) == "message.notification.title")
        #expect(try path(#"{"data":{"k\u0000":"v"}}"#) == "message.data")
        #expect(try path(#"{"android":{"x":[1,"ok",{"y":"\u0000"}]}}"#) == "message.android.x.2.y")
        // Sorted member order: the same answer whatever the dictionary's order.
        #expect(try path(#"{"b":"\u0000","a":{"c":"\u0000"}}"#) == "message.a.c")
        #expect(try path(#""\u0000""#) == "message")
        #expect(try path(#"{"notification":{"title":"a\\u0000b"},"n":null,"t":true,"i":1,"d":1.5}"#) == nil)
    }
}
