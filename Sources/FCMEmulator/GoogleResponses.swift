import Foundation
import HTTPTypes
import Hummingbird
import NIOFoundationCompat
import WireFormats

/// An answer with its whole body at hand: what the emulator's HTTP/2 connections write as frames
/// directly, and what its HTTP/1.1 routes return as a Hummingbird `Response`.
struct GoogleResponse: Sendable {
    var status: HTTPResponse.Status
    var headers: HTTPFields
    var body: ByteBuffer

    var response: Response {
        Response(status: status, headers: headers, body: .init(byteBuffer: body))
    }

    init(status: HTTPResponse.Status, headers: HTTPFields, body: ByteBuffer) {
        self.status = status
        self.headers = headers
        self.body = body
    }

    /// An answer file's status, headers and body; a header name HTTP does not allow is dropped.
    init(_ answer: FCMAnswer) {
        var headers = HTTPFields()
        for (name, value) in answer.headers.sorted(by: { $0.key < $1.key }) {
            guard let field = HTTPField.Name(name) else { continue }
            headers.append(HTTPField(name: field, value: value))
        }
        self.init(status: HTTPResponse.Status(code: answer.status), headers: headers, body: answer.body)
    }

    /// This answer with `Retry-After: seconds`, or without the header when `seconds` is nil.
    func retryingAfter(_ seconds: Int?) -> GoogleResponse {
        var answer = self
        answer.headers[.retryAfter] = seconds.map(String.init)
        return answer
    }
}

/// The JSON bodies Google's front ends answer with: `google.rpc.Status` for FCM, the OAuth error object for
/// the token endpoint.
enum GoogleResponses {
    static let fcmErrorType = "type.googleapis.com/google.firebase.fcm.v1.FcmError"
    static let badRequestType = "type.googleapis.com/google.rpc.BadRequest"
    static let errorInfoType = "type.googleapis.com/google.rpc.ErrorInfo"

    struct FieldViolation: Encodable, Sendable {
        var field: String
        var description: String
    }

    /// One entry of `error.details`.
    enum Detail: Encodable, Sendable {
        case badRequest([FieldViolation])
        case fcmError(errorCode: String)
        /// google.rpc.ErrorInfo: why, in a word Google's front ends use for every API.
        case errorInfo(reason: String, domain: String, metadata: [String: String])

        private enum CodingKeys: String, CodingKey {
            case type = "@type"
            case fieldViolations
            case errorCode
            case reason
            case domain
            case metadata
        }

        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            switch self {
            case .badRequest(let violations):
                try container.encode(GoogleResponses.badRequestType, forKey: .type)
                try container.encode(violations, forKey: .fieldViolations)
            case .fcmError(let errorCode):
                try container.encode(GoogleResponses.fcmErrorType, forKey: .type)
                try container.encode(errorCode, forKey: .errorCode)
            case .errorInfo(let reason, let domain, let metadata):
                try container.encode(GoogleResponses.errorInfoType, forKey: .type)
                try container.encode(reason, forKey: .reason)
                try container.encode(domain, forKey: .domain)
                try container.encode(metadata, forKey: .metadata)
            }
        }
    }

    private struct StatusEnvelope: Encodable {
        struct Status: Encodable {
            var code: Int
            var message: String
            var status: String
            var details: [Detail]?
        }
        var error: Status
    }

    private struct OAuthError: Encodable {
        var error: String
        var error_description: String
    }

    /// A `google.rpc.Status` error response.
    static func rpcStatus(
        _ httpStatus: HTTPResponse.Status,
        status: String,
        message: String,
        details: [Detail] = [],
        retryAfterSeconds: Int? = nil
    ) -> GoogleResponse {
        let envelope = StatusEnvelope(
            error: .init(code: httpStatus.code, message: message, status: status, details: details.isEmpty ? nil : details)
        )
        var response = json(httpStatus, encoded(envelope))
        if let retryAfterSeconds {
            response.headers[.retryAfter] = String(retryAfterSeconds)
        }
        return response
    }

    /// An OAuth 2 token endpoint error (`{"error": …, "error_description": …}`).
    static func oauthError(_ httpStatus: HTTPResponse.Status = .badRequest, error: String, description: String) -> GoogleResponse {
        json(httpStatus, encoded(OAuthError(error: error, error_description: description)))
    }

    static func json(_ status: HTTPResponse.Status, _ body: ByteBuffer) -> GoogleResponse {
        GoogleResponse(status: status, headers: [.contentType: "application/json; charset=UTF-8"], body: body)
    }

    static func json(_ status: HTTPResponse.Status, encoding value: some Encodable) -> GoogleResponse {
        json(status, encoded(value))
    }

    private static func encoded(_ value: some Encodable) -> ByteBuffer {
        ByteBuffer(data: WireJSON.encoded(value))
    }
}
