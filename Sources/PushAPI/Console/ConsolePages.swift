import Foundation
import Hummingbird
import Mustache

/// The console's templates (bundled `Templates/*.mustache`) and stylesheet, read once at
/// start-up. Mustache escapes every `{{value}}` for HTML, quotes included, so what users
/// control (device ids, message text, FCM's error messages) renders as text wherever it goes;
/// the templates use `{{{…}}}` only for the chart, which is ours.
struct ConsolePages: Sendable {
    private let library: MustacheLibrary
    let stylesheet: ByteBuffer

    init() throws(ConsolePagesError) {
        guard let resources = Bundle.module.resourceURL else { throw .missing("the bundle's resources") }
        let folder = resources.appendingPathComponent("Templates")
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        var library = MustacheLibrary()
        for name in names where name.hasSuffix(".mustache") {
            let path = folder.appendingPathComponent(name).path
            guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { throw .missing(path) }
            do {
                try library.register(text, named: String(name.dropLast(".mustache".count)))
            } catch {
                throw .invalid(name, "\(error)")
            }
        }
        for required in [
            "head", "foot", "error", "sign-in", "overview", "jobs", "job", "cancel", "progress", "compose",
            "deliveries", "devices", "apps", "sends-legend",
        ]
        where library.getTemplate(named: required) == nil {
            throw .missing("the template \(required).mustache")
        }
        let css = resources.appendingPathComponent("Assets/console.css")
        guard let stylesheet = try? Data(contentsOf: css) else { throw .missing(css.path) }
        self.library = library
        self.stylesheet = ByteBuffer(data: stylesheet)
    }

    /// The page `template` rendered with `view` (a struct whose properties the template names).
    func page(_ template: String, _ view: Any, status: HTTPResponse.Status = .ok) -> Response {
        let html = library.render(view, withTemplate: template) ?? ""
        return Response(
            status: status, headers: [.contentType: "text/html; charset=utf-8"],
            body: .init(byteBuffer: ByteBuffer(string: html)))
    }

    struct ErrorView {
        let chrome: PageChrome
        let heading: String
        let message: String
    }

    func error(status: HTTPResponse.Status, message: String) -> Response {
        page(
            "error",
            ErrorView(
                chrome: PageChrome(title: status.reasonPhrase), heading: "\(status.code) \(status.reasonPhrase)",
                message: message), status: status)
    }
}

enum ConsolePagesError: Error, CustomStringConvertible {
    case missing(String)
    case invalid(String, String)

    var description: String {
        switch self {
        case .missing(let what): "the console cannot start: \(what) is missing"
        case .invalid(let template, let reason): "the console template \(template) does not parse: \(reason)"
        }
    }
}

/// What the frame around every page needs: its title, the navigation (for a signed-in admin)
/// with the current page marked, and the sign-out form's CSRF token.
struct PageChrome {
    enum Section { case overview, jobs, compose, deliveries, devices, apps, none }

    let title: String
    let signedIn: Bool
    let csrf: String
    let onOverview: Bool
    let onJobs: Bool
    let onCompose: Bool
    let onDeliveries: Bool
    let onDevices: Bool
    let onApps: Bool
    /// Reload the page every few seconds (a job still running): live without any script.
    let autoRefresh: Bool

    init(title: String, csrf: String? = nil, section: Section = .none, autoRefresh: Bool = false) {
        self.title = title
        self.signedIn = csrf != nil
        self.csrf = csrf ?? ""
        self.onOverview = section == .overview
        self.onJobs = section == .jobs
        self.onCompose = section == .compose
        self.onDeliveries = section == .deliveries
        self.onDevices = section == .devices
        self.onApps = section == .apps
        self.autoRefresh = autoRefresh
    }
}
