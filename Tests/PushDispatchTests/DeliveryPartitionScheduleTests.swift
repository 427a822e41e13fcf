import Testing

@testable import PushDispatch

/// When push-worker creates the delivery log's partitions ahead and drops its old days: at
/// start, then hourly and daily on the start's clock; a failed drop is tried at the next hour.
@Suite struct DeliveryPartitionScheduleTests {
    let start = ContinuousClock.now
    let hour = DeliveryPartitionSchedule.tickInterval

    @Test func bothAtStartThenCreatingHourlyAndDroppingDaily() {
        var schedule = DeliveryPartitionSchedule(dropsOldDays: true, start: start)
        #expect(schedule.tick(at: start) == [.createAhead, .dropOldDays])
        schedule.dropped()
        #expect(schedule.nextTick == start + hour)
        #expect(schedule.tick(at: start + .seconds(1)) == [], "nothing before the next tick")
        for hours in 1..<24 {
            // Late by the time the work took: the ticks keep to the start's clock.
            #expect(schedule.tick(at: start + hour * hours + .seconds(2)) == [.createAhead], "hour \(hours)")
            #expect(schedule.nextTick == start + hour * (hours + 1))
        }
        #expect(schedule.tick(at: start + hour * 24 + .seconds(2)) == [.createAhead, .dropOldDays])
        schedule.dropped()
        #expect(schedule.tick(at: start + hour * 25) == [.createAhead])
    }

    @Test func aFailedDropIsTriedAgainAtTheNextTick() {
        var schedule = DeliveryPartitionSchedule(dropsOldDays: true, start: start)
        #expect(schedule.tick(at: start) == [.createAhead, .dropOldDays])
        #expect(schedule.tick(at: start + hour) == [.createAhead, .dropOldDays])
        schedule.dropped()
        #expect(schedule.tick(at: start + hour * 2) == [.createAhead])
        #expect(schedule.tick(at: start + hour * 24) == [.createAhead])
        #expect(schedule.tick(at: start + hour * 25) == [.createAhead, .dropOldDays], "a day after the drop that went through")
    }

    @Test func withRetentionOffNothingIsEverDropped() {
        var schedule = DeliveryPartitionSchedule(dropsOldDays: false, start: start)
        for hours in 0...48 {
            #expect(schedule.tick(at: start + hour * hours) == [.createAhead])
        }
    }

    @Test func missedTicksRunOnceAndTheNextIsStillOnTheHour() {
        var schedule = DeliveryPartitionSchedule(dropsOldDays: true, start: start)
        _ = schedule.tick(at: start)
        schedule.dropped()
        // Suspended for five and a half hours.
        #expect(schedule.tick(at: start + hour * 5 + .seconds(1800)) == [.createAhead])
        #expect(schedule.nextTick == start + hour * 6)
        #expect(schedule.tick(at: start + hour * 5 + .seconds(1801)) == [])
    }
}
