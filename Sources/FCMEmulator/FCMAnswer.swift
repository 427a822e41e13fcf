import Foundation
import NIOCore
import NIOFoundationCompat
import WireFormats

/// An FCM answer kept as a file: `{"about", "status", "headers", "body" or "bodyText"}`, each
/// written from FCM's documentation (its `about` says from where). The emulator's canned answers
/// are the files in its FCMAnswers folder; the worker's outcome table test classifies the same
/// files, so what the emulator answers and what the worker is tested against are one text.
public struct FCMAnswer: Sendable, Equatable {
    public var status: Int
    /// Header names as written in the file (`Content-Type`, `Retry-After`).
    public var headers: [String: String]
    /// `body` serialized as compact JSON with sorted keys, or `bodyText` as it is.
    public var body: ByteBuffer

    public init(status: Int, headers: [String: String], body: ByteBuffer) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// Reads one answer file.
    public init(fileContents data: Data) throws(FCMAnswerFileError) {
        guard let root = (try? JSONParser.parse(data))?.members else {
            throw FCMAnswerFileError("not a JSON object")
        }
        guard let status = root["status"]?.integer, (100...599).contains(status) else {
            throw FCMAnswerFileError("\"status\" must be an HTTP status code")
        }
        let headers = (root["headers"] ?? .object([:])).members?.compactMapValues(\.string)
        guard let headers, headers.count == root["headers"]?.members?.count ?? 0 else {
            throw FCMAnswerFileError("\"headers\" must map names to strings")
        }
        switch (root["body"], root["bodyText"]) {
        case (let body?, nil):
            self.init(status: Int(status), headers: headers, body: ByteBuffer(data: WireJSON.encoded(body)))
        case (nil, .string(let text)?):
            self.init(status: Int(status), headers: headers, body: ByteBuffer(string: text))
        default:
            throw FCMAnswerFileError("exactly one of \"body\" (JSON) and \"bodyText\" (a string) is required")
        }
    }

    /// The value of header `name`, whatever its case in the file.
    public func header(_ name: String) -> String? {
        headers.first { $0.key.caseInsensitiveCompare(name) == .orderedSame }?.value
    }
}

public struct FCMAnswerFileError: Error, Equatable, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}

/// The emulator's canned answers, read once from the module's FCMAnswers folder when the emulator
/// starts, so that a missing or broken file stops it at start rather than at the first send.
struct CannedAnswers: Sendable {
    let unregistered: GoogleResponse
    let invalidRegistrationToken: GoogleResponse
    let invalidRegistrationFID: GoogleResponse
    let senderIDMismatch: GoogleResponse
    let thirdPartyAuthError: GoogleResponse
    let quotaExceeded: GoogleResponse
    let rateLimitExceeded: GoogleResponse
    let unavailable: GoogleResponse
    let internalError: GoogleResponse
    let unauthenticated: GoogleResponse
    let insufficientScopes: GoogleResponse

    static func load() throws -> CannedAnswers {
        func answer(_ name: String) throws -> GoogleResponse {
            guard let url = Bundle.module.url(forResource: name, withExtension: "json", subdirectory: "FCMAnswers") else {
                throw FCMAnswerFileError("FCMAnswers/\(name).json is missing from the emulator's resource bundle")
            }
            do {
                return try GoogleResponse(FCMAnswer(fileContents: Data(contentsOf: url)))
            } catch {
                throw FCMAnswerFileError("FCMAnswers/\(name).json: \(error)")
            }
        }
        return CannedAnswers(
            unregistered: try answer("unregistered"),
            invalidRegistrationToken: try answer("invalid-registration-token"),
            invalidRegistrationFID: try answer("invalid-registration-fid"),
            senderIDMismatch: try answer("sender-id-mismatch"),
            thirdPartyAuthError: try answer("third-party-auth-error"),
            quotaExceeded: try answer("quota-exceeded"),
            rateLimitExceeded: try answer("rate-limit-exceeded"),
            unavailable: try answer("unavailable"),
            internalError: try answer("internal"),
            unauthenticated: try answer("unauthenticated"),
            insufficientScopes: try answer("insufficient-scopes")
        )
    }
}
