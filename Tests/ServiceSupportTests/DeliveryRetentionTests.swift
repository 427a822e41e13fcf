import ServiceSupport
import Testing

/// DELIVERY_RETENTION_DAYS: a whole number of days or `off`, 30 days unset; anything else is
/// refused with the variable named.
@Suite struct DeliveryRetentionTests {
    func retention(_ value: String?) throws(ConfigurationError) -> DeliveryRetention {
        try EnvironmentSettings(value.map { ["DELIVERY_RETENTION_DAYS": $0] } ?? [:], declared: ["DELIVERY_RETENTION_DAYS"])
            .deliveryRetention()
    }

    @Test func unsetOrEmptyIsThirtyDays() throws {
        #expect(try retention(nil) == .days(30))
        #expect(try retention("") == .days(30))
        #expect(DeliveryRetention.standard.description == "30 days")
    }

    @Test func daysOrOff() throws {
        #expect(try retention("1") == .days(1))
        #expect(try retention("90") == .days(90))
        #expect(try retention("3650") == .days(3650))
        #expect(try retention("off") == .keepEverything)
        #expect(DeliveryRetention.keepEverything.description == "off")
    }

    @Test(arguments: ["0", "-1", "3651", "30d", "1.5", "OFF", "none", " 30"])
    func anythingElseIsRefused(_ value: String) {
        #expect(
            throws: ConfigurationError.invalid(
                "DELIVERY_RETENTION_DAYS", "'\(value)' is neither a whole number of days in 1...3650 nor off")
        ) {
            try retention(value)
        }
    }
}
