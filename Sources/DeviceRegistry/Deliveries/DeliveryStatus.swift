/// The state of one device's delivery of a job (`push_deliveries.status`): pending until a
/// worker records a final result, or a retry's wait.
public enum DeliveryStatus: String, TextColumnEnum, Encodable {
    case pending, sent, failed, skipped
}
