import DeviceRegistry
import Testing

@Suite struct DeliveryCSVTests {
    @Test func cellsAreQuotedAndNeverRunAsFormulas() {
        #expect(DeliveryCSV.field("plain") == "plain")
        #expect(DeliveryCSV.field("") == "")
        #expect(DeliveryCSV.field("a,b") == #""a,b""#)
        #expect(DeliveryCSV.field(#"say "hi""#) == #""say ""hi""""#)
        #expect(DeliveryCSV.field("two\nlines") == "\"two\nlines\"")
        #expect(DeliveryCSV.field("=HYPERLINK(\"http://evil.example\",\"x\")") == #""'=HYPERLINK(""http://evil.example"",""x"")""#)
        #expect(DeliveryCSV.field("+1") == #""'+1""#)
        #expect(DeliveryCSV.field("-1+2") == #""'-1+2""#)
        #expect(DeliveryCSV.field("@SUM(A1)") == #""'@SUM(A1)""#)
        #expect(DeliveryCSV.field("\t=1") == "\"'\t=1\"")
        #expect(DeliveryCSV.field("1-2") == "1-2", "only a leading sign is a formula")
    }

    @Test func theHeaderNamesEveryColumnInOrder() {
        #expect(
            DeliveryCSV.header
                == "id,job_id,user_id,app,platform,token,status,attempts,updated_at,error_code,error_message,fcm_message_id,device_id,created_at,dry_run"
        )
    }
}
