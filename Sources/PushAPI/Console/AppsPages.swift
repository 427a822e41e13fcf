import DeviceRegistry
import Foundation
import Hummingbird

/// The apps and their Firebase credentials: what is set (project, client email, whether a send
/// has proven the project; never the key), setting credentials from a service-account JSON
/// (uploaded or pasted), capping an app's send rate, and adding an app. Read and written through
/// `AppDirectory`, the file checked by `ServiceAccount(json:)`, as `pushctl app add`,
/// `app set-credentials` and `app set-rate` do.
extension ConsoleController {
    struct AppCredentialsCard {
        let cardAppID: Int64
        let cardAppCode: String
        let cardAppName: String
        let cardHasCredentials: Bool
        let cardProjectID: String
        let cardClientEmail: String
        let cardIsProjectProven: Bool
        let cardRate: String
        let cardIsCapped: Bool
        /// What the rate field holds: the cap, or what was typed when it was refused.
        let cardRateInput: String
        let cardCreatedAt: String
        /// Why the last upload for this app was refused, shown next to its field.
        let credentialsProblem: String?
        /// Why the last rate for this app was refused, shown next to its field.
        let rateProblem: String?
    }

    struct AppsView {
        let chrome: PageChrome
        let csrf: String
        let notice: String?
        let apps: [AppCredentialsCard]
        let addCode: String
        let addName: String
        let addCodeProblem: String?
        let addNameProblem: String?
        let addAccountProblem: String?
    }

    /// Why a form was refused, by field: the page is shown again with each message next to its field.
    struct AppFormProblems {
        var code: String?
        var name: String?
        var account: String?
        /// For a credentials form: the app whose form it was.
        var credentialsOf: String?
        /// For a rate form: the app whose form it was, what was typed and why it was refused.
        var rateOf: (code: String, typed: String, problem: String)?

        var isEmpty: Bool { code == nil && name == nil && account == nil }
    }

    @Sendable func apps(_ request: Request, context: APIRequestContext) async throws -> Response {
        let session = try await signedIn(request)
        let query = try QueryParameters(request, allowed: ["added", "updated", "rate"], empty: .meansAny)
        let directory = AppDirectory(client: client, logger: context.logger)
        let known = try await deadline.run { try await directory.list() }
        // Only a code of an existing app is echoed: a crafted link cannot put words on the page.
        let notice: String? =
            if let code = query.string("added"), known.contains(where: { $0.code == code }) {
                "App \(code) added."
            } else if let code = query.string("updated"), let app = known.first(where: { $0.code == code }) {
                "Credentials of \(code) set: \(app.fcmClientEmail ?? "?") (project \(app.fcmProjectID ?? "?"))."
            } else if let code = query.string("rate"), let app = known.first(where: { $0.code == code }) {
                "Send rate of \(code): \(Self.rateText(app))."
            } else {
                nil
            }
        return appsPage(session: session, apps: known, notice: notice)
    }

    func appsPage(
        session: ConsoleSession, apps: [App], notice: String? = nil, problems: AppFormProblems = AppFormProblems(),
        code: String = "", name: String = "", status: HTTPResponse.Status = .ok
    ) -> Response {
        let csrf = sessions.csrfToken(for: session)
        let cards = apps.map { app in
            AppCredentialsCard(
                cardAppID: app.id, cardAppCode: app.code, cardAppName: app.name, cardHasCredentials: app.hasCredentials,
                cardProjectID: app.fcmProjectID ?? "none", cardClientEmail: app.fcmClientEmail ?? "none",
                cardIsProjectProven: app.isProjectProven,
                cardRate: Self.rateText(app), cardIsCapped: app.maxSendsPerSecond != nil,
                cardRateInput: problems.rateOf?.code == app.code
                    ? problems.rateOf?.typed ?? "" : app.maxSendsPerSecond.map(String.init) ?? "",
                cardCreatedAt: ConsoleText.time(app.createdAt),
                credentialsProblem: problems.credentialsOf == app.code ? problems.account : nil,
                rateProblem: problems.rateOf?.code == app.code ? problems.rateOf?.problem : nil)
        }
        let adding = problems.credentialsOf == nil && problems.rateOf == nil
        return pages.page(
            "apps",
            AppsView(
                chrome: PageChrome(title: "Apps", csrf: csrf, section: .apps), csrf: csrf, notice: notice, apps: cards,
                addCode: code, addName: name, addCodeProblem: adding ? problems.code : nil, addNameProblem: adding ? problems.name : nil,
                addAccountProblem: adding ? problems.account : nil), status: status)
    }

    /// The service account the form carries, uploaded as a file or pasted: nil when neither was
    /// given; a refusal in `ServiceAccountError`'s words otherwise.
    static func serviceAccount(in form: UploadForm) -> Result<ServiceAccount, ServiceAccountFormError>? {
        let file = form.files["serviceAccountFile"].flatMap { $0.content.isEmpty ? nil : $0 }
        let pasted = form.trimmed("serviceAccountJSON")
        let data: Data
        switch (file, pasted) {
        case (nil, nil): return nil
        case (.some, .some): return .failure(.init("Give either a file or pasted JSON, not both."))
        case (let file?, nil): data = file.content
        case (nil, let text?): data = Data(text.utf8)
        }
        do {
            return .success(try ServiceAccount(json: data))
        } catch {
            return .failure(.init(error.description))
        }
    }

    struct ServiceAccountFormError: Error {
        let message: String
        init(_ message: String) { self.message = message }
    }

    func signedInUpload(_ request: Request) async throws -> (ConsoleSession, UploadForm) {
        let session = try await signedIn(request)
        let form = try await UploadForm.read(request)
        guard sessions.acceptsCSRFToken(form["csrf"], for: session) else { throw ConsoleError.missingCSRFToken }
        return (session, form)
    }

    @Sendable func addApp(_ request: Request, context: APIRequestContext) async throws -> Response {
        let (session, form) = try await signedInUpload(request)
        let (code, name) = (form.trimmed("code") ?? "", form.trimmed("name") ?? "")
        let directory = AppDirectory(client: client, logger: context.logger)
        var problems = AppFormProblems()
        var account: ServiceAccount?
        switch Self.serviceAccount(in: form) {
        case .success(let parsed)?: account = parsed
        case .failure(let refusal)?: problems.account = refusal.message
        case nil: break
        }
        do {
            try AppDirectory.validate(code: code)
        } catch {
            problems.code = error.description
        }
        if problems.isEmpty {
            let chosen = account
            do {
                let app = try await deadline.run { try await directory.add(code: code, name: name, serviceAccount: chosen) }
                context.logger.info("app added", metadata: ["push.app": "\(app.code)", "push.by": "console"])
                return .redirect(to: "/console/apps?" + ConsoleText.query([("added", app.code)]))
            } catch let refusal as AppDirectoryError {
                switch refusal {
                case .invalidName: problems.name = refusal.description
                default: problems.code = refusal.description
                }
            }
        }
        let known = try await deadline.run { try await directory.list() }
        return appsPage(session: session, apps: known, problems: problems, code: code, name: name, status: .badRequest)
    }

    @Sendable func setAppCredentials(_ request: Request, context: APIRequestContext) async throws -> Response {
        let (session, form) = try await signedInUpload(request)
        let code = context.parameters.get("code") ?? ""
        let directory = AppDirectory(client: client, logger: context.logger)
        let refusal: String
        switch Self.serviceAccount(in: form) {
        case .success(let account)?:
            do {
                let app = try await deadline.run { try await directory.setCredentials(code: code, serviceAccount: account) }
                context.logger.info("app credentials set", metadata: ["push.app": "\(app.code)", "push.by": "console"])
                return .redirect(to: "/console/apps?" + ConsoleText.query([("updated", app.code)]))
            } catch let refusal as AppDirectoryError {
                if case .unknownCode = refusal { throw ConsoleError.notFound("There is no app \(code).") }
                throw refusal
            }
        case .failure(let problem)?: refusal = problem.message
        case nil: refusal = "Choose the service-account JSON file, or paste it."
        }
        let known = try await deadline.run { try await directory.list() }
        guard known.contains(where: { $0.code == code }) else { throw ConsoleError.notFound("There is no app \(code).") }
        return appsPage(
            session: session, apps: known, problems: AppFormProblems(account: refusal, credentialsOf: code), status: .badRequest)
    }

    static func rateText(_ app: App) -> String {
        app.maxSendsPerSecond.map { "at most \($0) sends per second" } ?? "unlimited"
    }

    /// Caps the app's sends per second (Set the cap, with a whole number), or lifts the cap (Lift
    /// the cap), through `AppDirectory.setRate` as `pushctl app set-rate` does: its range and its
    /// message for a number out of it. What is not a whole number is refused here, before it.
    @Sendable func setAppRate(_ request: Request, context: APIRequestContext) async throws -> Response {
        let (session, form) = try await signedInForm(request)
        let code = context.parameters.get("code") ?? ""
        let directory = AppDirectory(client: client, logger: context.logger)
        let typed = form.trimmed("perSecond") ?? ""
        var problem: String?
        var rate: Int?
        switch form["cap"] {
        case "lift": rate = nil
        case "set":
            if typed.isEmpty {
                problem = "Give the most sends per second, a whole number from 1 (or lift the cap)."
            } else if let number = Int(typed) {
                rate = number
            } else {
                problem = "the send rate must be a whole number of sends per second, not '\(typed.prefix(40))'"
            }
        default: throw ConsoleError.badRequest("cap must be set or lift")
        }
        if problem == nil {
            let chosen = rate
            do {
                let app = try await deadline.run { try await directory.setRate(code: code, perSecond: chosen) }
                context.logger.info(
                    "app send rate set",
                    metadata: [
                        "push.app": "\(app.code)", "push.rate": "\(app.maxSendsPerSecond.map(String.init) ?? "unlimited")",
                        "push.by": "console",
                    ])
                return .redirect(to: "/console/apps?" + ConsoleText.query([("rate", app.code)]))
            } catch let refusal as AppDirectoryError {
                if case .unknownCode = refusal { throw ConsoleError.notFound("There is no app \(code).") }
                problem = refusal.description
            }
        }
        let known = try await deadline.run { try await directory.list() }
        guard known.contains(where: { $0.code == code }) else { throw ConsoleError.notFound("There is no app \(code).") }
        return appsPage(
            session: session, apps: known, problems: AppFormProblems(rateOf: (code, typed, problem ?? "")), status: .badRequest)
    }
}
