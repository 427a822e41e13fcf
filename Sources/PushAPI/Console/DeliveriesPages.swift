import DeviceRegistry
import Foundation
import Hummingbird
import WireFormats

/// The delivery audit: the admin API's filters (job, user, app, status, since) over `DeliveryLog`,
/// newest first in keyset pages, and the filtered rows as a streamed CSV file.
extension ConsoleController {
    func addDeliveriesDevicesAndAppsRoutes(to console: RouterGroup<APIRequestContext>) {
        console.get("deliveries", use: deliveries)
        console.get("deliveries.csv", use: deliveriesCSV)
        console.get("devices", use: devices)
        console.get("apps", use: apps)
        console.post("apps", use: addApp)
        console.post("apps/:code/credentials", use: setAppCredentials)
        console.post("apps/:code/rate", use: setAppRate)
    }

    struct DeliveryRow {
        let deliveryID: Int64
        let deliveryJob: Int64
        let deliveryUser: Int64
        let deliveryApp: String
        let deliveryPlatform: String
        let deliveryToken: String
        let deliveryStatus: String
        let isDryRun: Bool
        let hasDeliveryError: Bool
        let deliveryErrorCode: String
        let deliveryErrorMessage: String
        let deliveryAttempts: Int
        let deliveryUpdatedAt: String
        let devicesLink: String

        init(_ record: DeliveryRecord) {
            deliveryID = record.id
            deliveryJob = record.jobID
            deliveryUser = record.userID
            deliveryApp = record.appCode
            deliveryPlatform = record.platform.rawValue
            deliveryToken = record.maskedToken
            deliveryStatus = record.status.rawValue
            isDryRun = record.dryRun
            hasDeliveryError = record.errorCode != nil || record.errorMessage != nil
            deliveryErrorCode = record.errorCode ?? ""
            deliveryErrorMessage = record.errorMessage ?? ""
            deliveryAttempts = record.attempts
            deliveryUpdatedAt = ConsoleText.time(record.updatedAt)
            devicesLink = "/console/devices?" + ConsoleText.query([("app", record.appCode), ("user", String(record.userID))])
        }
    }

    struct DeliveriesView {
        let chrome: PageChrome
        let filterJob: String
        let filterUser: String
        let filterSince: String
        let appOptions: [Option]
        let statusOptions: [Option]
        let deliveries: [DeliveryRow]
        let hasDeliveries: Bool
        let hasOlder: Bool
        let olderLink: String
        let csvLink: String
    }

    static let deliveriesPageSize = 50

    /// The filter a deliveries query string asks for, read with the admin API's rules and
    /// messages (`since` as ISO 8601 with a zone); `before` is the keyset cursor.
    struct DeliveriesQuery {
        static let filterNames: Set<String> = ["job", "user", "app", "status", "since"]

        let filter: DeliveryFilter
        let before: Int64?
        let sinceText: String?

        init(_ request: Request, paged: Bool) throws(QueryProblem) {
            let query = try QueryParameters(
                request, allowed: paged ? Self.filterNames.union(["before"]) : Self.filterNames, empty: .meansAny)
            sinceText = query.string("since")
            filter = DeliveryFilter(
                jobID: try query.positiveInteger("job"), userID: try query.positiveInteger("user"),
                appCode: query.string("app"), status: try query.oneOf("status", DeliveryStatus.self), since: try query.time("since"))
            before = paged ? try query.positiveInteger("before") : nil
        }

        /// The filter as query parameters, for the next page's link and the CSV export's.
        var parameters: [(String, String?)] {
            [
                ("job", filter.jobID.map(String.init)), ("user", filter.userID.map(String.init)), ("app", filter.appCode),
                ("status", filter.status?.rawValue), ("since", sinceText),
            ]
        }
    }

    @Sendable func deliveries(_ request: Request, context: APIRequestContext) async throws -> Response {
        let session = try await signedIn(request)
        let query = try DeliveriesQuery(request, paged: true)
        let (log, apps) = (
            DeliveryLog(client: audit.client, logger: context.logger), AppDirectory(client: audit.client, logger: context.logger)
        )
        let (page, known) = try await deadline.run {
            (try await log.page(query.filter, below: query.before, limit: Self.deliveriesPageSize), try await apps.list())
        }
        let older = page.nextCursor.map { "/console/deliveries?" + ConsoleText.query(query.parameters + [("before", String($0))]) } ?? ""
        let filterQuery = ConsoleText.query(query.parameters)
        return pages.page(
            "deliveries",
            DeliveriesView(
                chrome: PageChrome(title: "Deliveries", csrf: sessions.csrfToken(for: session), section: .deliveries),
                filterJob: query.filter.jobID.map(String.init) ?? "", filterUser: query.filter.userID.map(String.init) ?? "",
                filterSince: query.sinceText ?? "",
                appOptions: known.map { Option(value: $0.code, label: $0.code, selected: $0.code == query.filter.appCode) },
                statusOptions: DeliveryStatus.allCases.map {
                    Option(value: $0.rawValue, label: $0.rawValue, selected: $0 == query.filter.status)
                },
                deliveries: page.deliveries.map(DeliveryRow.init), hasDeliveries: !page.deliveries.isEmpty,
                hasOlder: !older.isEmpty, olderLink: older,
                csvLink: "/console/deliveries.csv" + (filterQuery.isEmpty ? "" : "?" + filterQuery)))
    }

    /// Every delivery the filter selects, newest first, as CSV. The rows go out as PostgreSQL
    /// sends them (`DeliveryLog.each` into the response body, 64 KiB at a time), so an export of
    /// a million rows holds one chunk and PostgresNIO's bounded row buffer, never the rows.
    @Sendable func deliveriesCSV(_ request: Request, context: APIRequestContext) async throws -> Response {
        _ = try await signedIn(request)
        let query = try DeliveriesQuery(request, paged: false)
        let log = DeliveryLog(client: audit.client, logger: context.logger)
        // Once the 200 has gone out an error can only cut the download short: ask the database
        // first, so that one that does not answer is a 503 page instead.
        let apps = AppDirectory(client: audit.client, logger: context.logger)
        _ = try await deadline.run { try await apps.list() }
        let filter = query.filter
        let logger = context.logger
        let body = ResponseBody { writer in
            var chunk = ByteBuffer()
            chunk.reserveCapacity(DeliveriesCSV.chunkSize)
            DeliveriesCSV.writeHeader(into: &chunk)
            do {
                try await log.each(filter) { record in
                    DeliveriesCSV.write(record, into: &chunk)
                    if chunk.readableBytes >= DeliveriesCSV.chunkSize {
                        try await writer.write(chunk)
                        chunk.clear()
                    }
                }
            } catch {
                logger.error("console CSV export failed", metadata: ["error": "\(error)"])
                throw error
            }
            if chunk.readableBytes > 0 { try await writer.write(chunk) }
            try await writer.finish(nil)
        }
        return Response(
            status: .ok,
            headers: [
                .contentType: "text/csv; charset=utf-8",
                .contentDisposition: #"attachment; filename="deliveries.csv""#,
            ], body: body)
    }
}
