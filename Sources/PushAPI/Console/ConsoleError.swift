import Hummingbird

/// Why a console request was refused; shown to the admin as a page with the message.
enum ConsoleError: Error, Equatable {
    case badRequest(String)
    /// A state-changing form without a valid CSRF token (or an expired sign-in form).
    case forbidden(String)
    case notFound(String)
    /// The request needs a signed-in session (a GET is redirected to the sign-in form instead).
    case signInRequired
    case conflict(String)

    var status: HTTPResponse.Status {
        switch self {
        case .badRequest: .badRequest
        case .forbidden: .forbidden
        case .notFound: .notFound
        case .signInRequired: .unauthorized
        case .conflict: .conflict
        }
    }

    var message: String {
        switch self {
        case .badRequest(let message), .forbidden(let message), .notFound(let message), .conflict(let message): message
        case .signInRequired: "Sign in first: your session has ended or was never started."
        }
    }

    static let missingCSRFToken = ConsoleError.forbidden(
        "This form's security token is missing or does not belong to your session; reload the page and try again.")
}
