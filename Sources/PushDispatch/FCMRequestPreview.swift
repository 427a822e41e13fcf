import DeviceRegistry
import Foundation
import NIOCore

/// The FCM request body the worker would send for a job, written by the worker's own
/// `PreparedMessage`: the console's compose page shows it before anything is queued.
public enum FCMRequestPreview {
    /// The body of `projects.messages.send` for one device with `target` as its token, sent at
    /// `sendAt`: the message as stored, the expiry's fields with the lifetime left at that moment,
    /// `validate_only` for a dry run.
    public static func body(
        messageJSON: String, dryRun: Bool, expiresAt: Date?, target: String, type: TokenType,
        sendAt: Date
    ) -> String {
        let prepared = PreparedMessage(messageJSON: messageJSON, validateOnly: dryRun, expiresAt: expiresAt)
        return String(buffer: prepared.body(target: target, type: type, now: sendAt))
    }
}
