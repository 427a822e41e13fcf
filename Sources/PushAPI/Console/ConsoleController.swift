import DeviceRegistry
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import PostgresNIO
import ServiceSupport
import WireFormats

/// The admin console under `/console`: server-rendered pages over the same stores as the admin
/// API, behind a sign-in with `PUSH_ADMIN_TOKEN`. Mounted only when that token is set.
struct ConsoleController {
    /// Forms that change something (cancel, compose, apps) and what they show, on the primary.
    let client: PostgresClient
    /// What the pages list (overview, jobs, a job, deliveries, devices): the primary or a
    /// standby (DATABASE_READ_URL), whose lag the overview shows.
    let audit: AuditSource
    let sessions: ConsoleSessions
    let signOuts: ConsoleSignOuts
    let throttle: SignInThrottle
    let pages: ConsolePages
    let deadline: DatabaseDeadline

    func addRoutes(to console: RouterGroup<APIRequestContext>) {
        console.add(middleware: ConsolePageMiddleware(pages: pages))
        console.get("console.css", use: stylesheet)
        console.get("sign-in", use: signInForm)
        console.post("sign-in", use: signIn)
        console.post("sign-out", use: signOut)
        console.get(use: overview)
        console.get("jobs", use: jobs)
        console.get("jobs/:id", use: job)
        console.get("jobs/:id/cancel", use: cancelConfirmation)
        console.post("jobs/:id/cancel", use: cancel)
        addComposeRoutes(to: console)
        addDeliveriesDevicesAndAppsRoutes(to: console)
    }

    // MARK: sessions

    /// The signed-in session, or `signInRequired` (a GET is then redirected to the form).
    func signedIn(_ request: Request) async throws -> ConsoleSession {
        guard let value = request.cookies[ConsoleSessions.cookieName]?.value, let session = sessions.session(cookieValue: value) else {
            throw ConsoleError.signInRequired
        }
        let signOuts = signOuts
        guard try await !deadline.run({ try await signOuts.contains(session) }) else { throw ConsoleError.signInRequired }
        return session
    }

    /// A state-changing form's session, with its CSRF token checked.
    func signedInForm(_ request: Request) async throws -> (ConsoleSession, FormBody) {
        let session = try await signedIn(request)
        let form = try await FormBody.read(request)
        guard sessions.acceptsCSRFToken(form["csrf"], for: session) else { throw ConsoleError.missingCSRFToken }
        return (session, form)
    }

    /// Secure when the browser reached us over TLS: through a proxy that says so.
    static func isTLS(_ request: Request) -> Bool {
        request.uri.scheme == .https || request.headers[.xForwardedProto]?.lowercased() == "https"
    }

    static func cookie(_ name: String, _ value: String, maxAge: Duration, request: Request) -> Cookie {
        Cookie(
            name: name, value: value, maxAge: Int(maxAge.components.seconds), path: "/console", secure: isTLS(request),
            httpOnly: true, sameSite: .strict)
    }

    struct SignInView {
        let chrome = PageChrome(title: "Sign in")
        let formToken: String
        let problem: String?
    }

    func signInPage(_ request: Request, problem: String? = nil, status: HTTPResponse.Status = .ok) -> Response {
        let form = sessions.startSignInForm()
        var response = pages.page("sign-in", SignInView(formToken: form.token, problem: problem), status: status)
        response.setCookie(
            Self.cookie(
                ConsoleSessions.signInCookieName, form.nonce, maxAge: ConsoleSessions.signInFormLifetime,
                request: request))
        if status == .tooManyRequests, let seconds = problem.flatMap(Self.retrySeconds) { response.headers[.retryAfter] = seconds }
        return response
    }

    @Sendable func signInForm(_ request: Request, context: APIRequestContext) async throws -> Response {
        if (try? await signedIn(request)) != nil { return .redirect(to: "/console") }
        return signInPage(request)
    }

    @Sendable func signIn(_ request: Request, context: APIRequestContext) async throws -> Response {
        let form = try await FormBody.read(request)
        guard sessions.acceptsSignInForm(nonce: request.cookies[ConsoleSessions.signInCookieName]?.value, token: form["csrf"]) else {
            throw ConsoleError.forbidden("This sign-in form has expired or did not come from this console; reload it and sign in again.")
        }
        if let wait = throttle.wait() {
            let seconds = max(1, wait.components.seconds + (wait.components.attoseconds > 0 ? 1 : 0))
            return signInPage(
                request, problem: "Too many wrong tokens: sign-in is paused, try again in \(seconds) s.",
                status: .tooManyRequests)
        }
        guard let token = form["token"], sessions.acceptsAdminToken(token) else {
            throttle.recordFailure()
            context.logger.notice("console sign-in refused")
            return signInPage(request, problem: "That is not the admin token (PUSH_ADMIN_TOKEN).", status: .unauthorized)
        }
        throttle.recordSuccess()
        let (_, value) = sessions.start()
        context.logger.info("console sign-in")
        var response = Response.redirect(to: "/console")
        response.setCookie(Self.cookie(ConsoleSessions.cookieName, value, maxAge: ConsoleSessions.lifetime, request: request))
        response.setCookie(Self.cookie(ConsoleSessions.signInCookieName, "", maxAge: .zero, request: request))
        return response
    }

    @Sendable func signOut(_ request: Request, context: APIRequestContext) async throws -> Response {
        let (session, _) = try await signedInForm(request)
        let signOuts = signOuts
        try await deadline.run { try await signOuts.record(session) }
        var response = Response.redirect(to: "/console/sign-in")
        response.setCookie(Self.cookie(ConsoleSessions.cookieName, "", maxAge: .zero, request: request))
        return response
    }

    static func retrySeconds(_ problem: String) -> String? {
        problem.firstMatch(of: /in (\d+) s\./).map { String($0.1) }
    }

    @Sendable func stylesheet(_ request: Request, context: APIRequestContext) async throws -> Response {
        Response(status: .ok, headers: [.contentType: "text/css; charset=utf-8"], body: .init(byteBuffer: pages.stylesheet))
    }

    // MARK: overview

    struct OverviewView {
        struct AppCard {
            let appID: Int64
            let appCode: String
            let appName: String
            let hasCredentials: Bool
            let activeDevices: Int
            let inactiveDevices: Int
            let runningJobs: Int
            let queuedJobs: Int
            let queueDepth: Int
            let hasOldestDue: Bool
            let oldestDueJobID: Int64
            let oldestDueAge: String
            let chart: String
            let sends24h: SendCounts
        }

        let chrome: PageChrome
        let apps: [AppCard]
        /// "no lag", "2.4 s behind": only when the pages are read from a standby.
        let hasReplica: Bool
        let replicaLag: String
    }

    @Sendable func overview(_ request: Request, context: APIRequestContext) async throws -> Response {
        let session = try await signedIn(request)
        let (report, audit, logger) = (OverviewReport(client: audit.client, logger: context.logger), self.audit, context.logger)
        let now = Date()
        let (activity, lag) = try await deadline.run {
            async let lag = audit.lag(logger: logger)
            let activity = try await report.activity(now: now)
            return (activity, try await lag)
        }
        let cards = activity.map { line in
            return OverviewView.AppCard(
                appID: line.app.id, appCode: line.app.code, appName: line.app.name, hasCredentials: line.app.hasCredentials,
                activeDevices: line.activeDevices, inactiveDevices: line.inactiveDevices, runningJobs: line.runningJobs,
                queuedJobs: line.queuedJobs, queueDepth: line.queueDepth, hasOldestDue: line.oldestDue != nil,
                oldestDueJobID: line.oldestDue?.jobID ?? 0,
                oldestDueAge: line.oldestDue.map { ConsoleText.age(since: $0.sendAt, now: now) } ?? "",
                chart: SendsChart.lastDay(line.hourlySends, id: "sends-\(line.app.id)").svg, sends24h: SendCounts.sum(line.hourlySends))
        }
        return pages.page(
            "overview",
            OverviewView(
                chrome: PageChrome(title: "Overview", csrf: sessions.csrfToken(for: session), section: .overview), apps: cards,
                hasReplica: lag != nil, replicaLag: lag.map(String.init(describing:)) ?? ""))
    }

    // MARK: jobs

    struct Option {
        let value: String
        let label: String
        let selected: Bool
    }

    struct ProgressView {
        let counted: Bool
        let done: Int
        let total: Int
        let percent: Int

        init(_ job: JobSummary) {
            counted = job.audience != nil
            total = job.audience ?? 0
            done = job.sent + job.failed + job.skipped
            // An empty audience is all done; a finished job shows what it reached.
            percent = total == 0 ? (job.status.isFinished ? 100 : 0) : min(100, done * 100 / total)
        }
    }

    struct JobRow {
        let jobID: Int64
        let jobApp: String
        let jobKind: String
        let hasTitle: Bool
        let jobTitle: String
        let jobStatus: String
        let jobPriority: String
        let jobSendAt: String
        let isDryRun: Bool
        let progress: ProgressView

        init(_ job: JobSummary) {
            jobID = job.id
            jobApp = job.appCode
            jobKind = job.kind.rawValue
            hasTitle = job.title != nil
            jobTitle = job.title ?? ""
            jobStatus = job.status.rawValue
            jobPriority = job.priority.rawValue
            jobSendAt = ConsoleText.time(job.sendAt)
            isDryRun = job.dryRun
            progress = ProgressView(job)
        }
    }

    struct JobsView {
        let chrome: PageChrome
        let appOptions: [Option]
        let statusOptions: [Option]
        let kindOptions: [Option]
        let priorityOptions: [Option]
        let jobs: [JobRow]
        let hasJobs: Bool
        let hasOlder: Bool
        let olderLink: String
    }

    static let jobsPageSize = 50

    @Sendable func jobs(_ request: Request, context: APIRequestContext) async throws -> Response {
        let session = try await signedIn(request)
        let query = try QueryParameters(request, allowed: ["app", "status", "kind", "priority", "before"], empty: .meansAny)
        let filter = JobFilter(
            appCode: query.string("app"), status: try query.oneOf("status", JobStatus.self),
            kind: try query.oneOf("kind", JobKind.self), priority: try query.oneOf("priority", JobPriority.self))
        let before = try query.positiveInteger("before")
        let (jobs, apps) = (
            JobDirectory(client: audit.client, logger: context.logger), AppDirectory(client: audit.client, logger: context.logger)
        )
        let (found, known) = try await deadline.run {
            (try await jobs.list(filter, below: before, limit: Self.jobsPageSize + 1), try await apps.list())
        }
        let page = Array(found.prefix(Self.jobsPageSize))
        var older = ""
        if found.count > Self.jobsPageSize, let last = page.last {
            older =
                "/console/jobs?"
                + ConsoleText.query([
                    ("app", filter.appCode), ("status", filter.status?.rawValue), ("kind", filter.kind?.rawValue),
                    ("priority", filter.priority?.rawValue), ("before", String(last.id)),
                ])
        }
        func options(_ values: [String], _ selected: String?) -> [Option] {
            values.map { Option(value: $0, label: $0, selected: $0 == selected) }
        }
        return pages.page(
            "jobs",
            JobsView(
                chrome: PageChrome(title: "Jobs", csrf: sessions.csrfToken(for: session), section: .jobs),
                appOptions: options(known.map(\.code), filter.appCode),
                statusOptions: options(JobStatus.allCases.map(\.rawValue), filter.status?.rawValue),
                kindOptions: options(JobKind.allCases.map(\.rawValue), filter.kind?.rawValue),
                priorityOptions: options(JobPriority.allCases.map(\.rawValue), filter.priority?.rawValue),
                jobs: page.map(JobRow.init), hasJobs: !page.isEmpty, hasOlder: !older.isEmpty, olderLink: older))
    }

    // MARK: one job

    struct OutcomeRow {
        let outcomeStatus: String
        let outcomeCode: String
        let outcomeCount: Int
    }

    struct FailureRow {
        let deliveryID: Int64
        let deliveryUser: Int64
        let deliveryToken: String
        let deliveryError: String
        let deliveryAttempts: Int
        let deliveryUpdatedAt: String
    }

    struct JobView {
        let chrome: PageChrome
        let jobID: Int64
        let jobStatus: String
        let jobApp: String
        let jobPriority: String
        let jobSendAt: String
        let jobCreatedAt: String
        let jobFinishedAt: String
        let jobExpiresAt: String
        let isDryRun: Bool
        let isLive: Bool
        let isCancellable: Bool
        let audienceText: String
        let idempotencyKey: String
        let messageJSON: String
        let progress: ProgressView
        let sentCount: Int
        let failedCount: Int
        let skippedCount: Int
        let pendingCount: Int
        let outcomes: [OutcomeRow]
        let hasOutcomes: Bool
        let hasFirstError: Bool
        let firstError: String
        let failures: [FailureRow]
        let hasFailures: Bool
        let hasSends: Bool
        let sendsChart: String
        let sendsTotal: SendCounts
        let sendsSlot: String
        let sendsRows: [SendsRow]
    }

    /// A slot of the job's sends chart in its table (the chart's text alternative).
    struct SendsRow {
        let slotStart: String
        let counts: SendCounts
    }

    static let failuresShown = 10

    @Sendable func job(_ request: Request, context: APIRequestContext) async throws -> Response {
        let session = try await signedIn(request)
        let id = try Self.jobID(context)
        let logger = context.logger
        typealias JobRead = (JobSummary, JobContent, [JobOutcome], DeliveryLog.Page, JobSends)
        @Sendable func readJob(from client: PostgresClient) async throws -> JobRead? {
            let (jobs, log, report) = (
                JobDirectory(client: client, logger: logger), DeliveryLog(client: client, logger: logger),
                JobSendsReport(client: client, logger: logger)
            )
            guard let summary = try await jobs.job(id), let content = try await jobs.content(id),
                let sends = try await report.sends(job: id)
            else { return nil }
            return (
                summary, content, try await jobs.outcomes(id),
                try await log.page(DeliveryFilter(jobID: id, status: .failed), below: nil, limit: Self.failuresShown), sends
            )
        }
        // A job just composed that the standby has not replayed yet is read from the primary.
        let (audit, primary) = (self.audit, client)
        let read: JobRead? = try await deadline.run {
            if let found = try await readJob(from: audit.client) { return found }
            guard case .replica = audit else { return nil }
            return try await readJob(from: primary)
        }
        guard let (summary, content, outcomes, failures, sends) = read else { throw ConsoleError.notFound("There is no job #\(id).") }
        let audience: String =
            if let users = content.userCount {
                users == 1 ? "1 user's active devices" : "\(users) users' active devices"
            } else if let platforms = content.platforms {
                "campaign: every active \(platforms.map(\.rawValue).joined(separator: ", ")) device of the app"
            } else {
                "campaign: every active device of the app"
            }
        let view = JobView(
            chrome: PageChrome(
                title: "Job #\(id)", csrf: sessions.csrfToken(for: session), section: .jobs,
                autoRefresh: !summary.status.isFinished),
            jobID: id, jobStatus: summary.status.rawValue, jobApp: summary.appCode, jobPriority: summary.priority.rawValue,
            jobSendAt: ConsoleText.time(summary.sendAt), jobCreatedAt: ConsoleText.time(summary.createdAt),
            jobFinishedAt: summary.finishedAt.map(ConsoleText.time) ?? "not yet",
            jobExpiresAt: summary.expiresAt.map(ConsoleText.time) ?? "never", isDryRun: summary.dryRun,
            isLive: !summary.status.isFinished, isCancellable: !summary.status.isFinished, audienceText: audience,
            idempotencyKey: content.idempotencyKey ?? "none", messageJSON: content.message, progress: ProgressView(summary),
            sentCount: summary.sent, failedCount: summary.failed, skippedCount: summary.skipped, pendingCount: summary.pending,
            outcomes: outcomes.map {
                OutcomeRow(outcomeStatus: $0.status.rawValue, outcomeCode: $0.errorCode ?? "-", outcomeCount: $0.count)
            },
            hasOutcomes: !outcomes.isEmpty, hasFirstError: summary.firstError != nil, firstError: summary.firstError ?? "",
            failures: failures.deliveries.map {
                FailureRow(
                    deliveryID: $0.id, deliveryUser: $0.userID, deliveryToken: $0.maskedToken,
                    deliveryError: [$0.errorCode, $0.errorMessage].compactMap { $0 }.joined(separator: ": "),
                    deliveryAttempts: $0.attempts, deliveryUpdatedAt: ConsoleText.time($0.updatedAt))
            },
            hasFailures: !failures.deliveries.isEmpty, hasSends: sends.total.total > 0, sendsChart: sends.chart(id: "sends").svg,
            sendsTotal: sends.total, sendsSlot: sends.slots.name,
            sendsRows: sends.counts.enumerated().compactMap { index, counts in
                counts.total == 0 ? nil : SendsRow(slotStart: ConsoleText.time(sends.slots.start(ofSlot: index)), counts: counts)
            })
        return pages.page("job", view)
    }

    struct CancelView {
        let chrome: PageChrome
        let jobID: Int64
        let csrf: String
    }

    @Sendable func cancelConfirmation(_ request: Request, context: APIRequestContext) async throws -> Response {
        let session = try await signedIn(request)
        let id = try Self.jobID(context)
        let jobs = JobDirectory(client: client, logger: context.logger)
        guard let job = try await deadline.run({ try await jobs.job(id) }) else { throw ConsoleError.notFound("There is no job #\(id).") }
        guard !job.status.isFinished else { throw ConsoleError.conflict("Job #\(id) is already \(job.status.rawValue).") }
        let csrf = sessions.csrfToken(for: session)
        return pages.page(
            "cancel",
            CancelView(
                chrome: PageChrome(title: "Cancel job #\(id)", csrf: csrf, section: .jobs),
                jobID: id, csrf: csrf))
    }

    @Sendable func cancel(_ request: Request, context: APIRequestContext) async throws -> Response {
        _ = try await signedInForm(request)
        let id = try Self.jobID(context)
        let jobs = JobDirectory(client: client, logger: context.logger)
        switch try await deadline.run({ try await jobs.cancel(id) }) {
        case .notFound: throw ConsoleError.notFound("There is no job #\(id).")
        case .alreadyFinished(let status): throw ConsoleError.conflict("Job #\(id) is already \(status.rawValue).")
        case .cancelled:
            context.logger.info("job cancelled", metadata: ["push.job_id": "\(id)", "push.by": "console"])
            return .redirect(to: "/console/jobs/\(id)")
        }
    }

    static func jobID(_ context: APIRequestContext) throws(ConsoleError) -> Int64 {
        guard let id = context.parameters.get("id").flatMap({ Int64(plainDecimal: $0) }), id > 0 else {
            throw .badRequest("A job id is a positive integer.")
        }
        return id
    }
}

extension HTTPField.Name {
    static let xForwardedProto = Self("X-Forwarded-Proto")!
}
