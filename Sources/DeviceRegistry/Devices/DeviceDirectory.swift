import Foundation
import Logging
import PostgresNIO

/// The device rules, shared by the registration API and the dispatch worker. The upsert and its
/// side effects live in the SQL function `push_register_device` (its current definition:
/// sql/011_device_rules_per_user.sql): one round trip, one transaction.
public struct DeviceDirectory: Sendable {
    let client: PostgresClient
    /// Registrations go as named prepared statements only where a connection keeps its
    /// session; behind a transaction pooler the same SQL goes unnamed (parsed and planned each
    /// time, within its own round trip).
    let pooler: PoolerMode

    /// Active devices per (user, app) unless the caller says otherwise; also the SQL function's
    /// default. A person's phones, tablets and browsers fit with room to spare, while tokens
    /// that rotate without a deviceId (each leaving an active row FCM has not refused yet) and
    /// a hostile client are held to it.
    public static let defaultMaximumActiveDevices = 20

    public init(client: PostgresClient, pooler: PoolerMode = .session) {
        self.client = client
        self.pooler = pooler
    }

    public struct Registered: Sendable, Equatable {
        public let device: Device
        /// True when the row was inserted, false when an existing row was refreshed.
        public let created: Bool
    }

    /// Registers `registration` for the user: upsert on (user, app, token), active, `last_used_at`
    /// now. In the same transaction: another user's active row for the token is deactivated
    /// (`account_switch`), the user's other active tokens on the same `deviceId` (`replaced`), and
    /// the user's least recently registered devices beyond `maximumActiveDevices` in the app
    /// (`device_limit`).
    public func register(
        _ registration: DeviceRegistration, userID: Int64, appID: Int64,
        maximumActiveDevices: Int = defaultMaximumActiveDevices, logger: Logger
    ) async throws -> Registered {
        let statement = RegisterStatement(
            userID: userID, appID: appID, registration: registration,
            maximumActiveDevices: maximumActiveDevices)
        let row = try await Self.retryingConflicts(logger: logger) {
            guard let row = try await DatabaseStatement.run(statement, on: client, pooler: pooler, logger: logger).first else {
                preconditionFailure("push_register_device returns exactly one row")
            }
            return row
        }
        return Self.registered(row)
    }

    /// One registration of a batch: who registers which device.
    public struct Registration: Sendable, Equatable {
        public let device: DeviceRegistration
        public let userID: Int64
        public let appID: Int64

        public init(_ device: DeviceRegistration, userID: Int64, appID: Int64) {
            self.device = device
            self.userID = userID
            self.appID = appID
        }
    }

    /// Registers a batch in one statement and one transaction, in order, each exactly as
    /// `register` would (a later registration of the batch sees the earlier ones). Most of a
    /// registration's cost in the database is the statement and the commit around the function,
    /// not the function itself: a batch of 4 to 8 costs PostgreSQL about half the CPU per
    /// registration. All or nothing: any error fails the whole batch, and is not retried here.
    public func register(
        batch: [Registration], maximumActiveDevices: Int = defaultMaximumActiveDevices,
        logger: Logger
    ) async throws -> [Registered] {
        var registered = [Registered?](repeating: nil, count: batch.count)
        let statement = RegisterBatchStatement(batch: batch, maximumActiveDevices: maximumActiveDevices)
        for row in try await DatabaseStatement.run(statement, on: client, pooler: pooler, logger: logger) {
            registered[Int(row.0) - 1] = Self.registered(row.1)
        }
        let result = registered.compactMap { $0 }
        precondition(result.count == batch.count, "push_register_device returns exactly one row per registration")
        return result
    }

    private static func registered(_ row: RegisterStatement.Row) -> Registered {
        let device = Device(
            id: row.0, userID: row.1, appID: row.2, token: row.3, tokenType: row.4, platform: row.5, deviceID: row.6, isActive: row.7,
            lastUsedAt: row.8, createdAt: row.9, deactivatedAt: nil, deactivationReason: nil)
        return Registered(device: device, created: row.10)
    }

    /// A named prepared statement: the busiest query of the API is parsed and planned once per
    /// connection, not on every registration.
    struct RegisterStatement: PostgresPreparedStatement {
        static let name = "push_register_device"
        static let sql = """
            SELECT id, user_id, app_id, token, token_type, platform, device_id, is_active,
                   last_used_at, created_at, created
              FROM push_register_device($1, $2, $3, $4, $5, $6, $7)
            """
        typealias Row = (Int64, Int64, Int64, String, TokenType, Platform, String?, Bool, Date, Date, Bool)

        let userID: Int64
        let appID: Int64
        let registration: DeviceRegistration
        let maximumActiveDevices: Int

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 7)
            bindings.append(userID)
            bindings.append(appID)
            bindings.append(registration.token)
            bindings.append(registration.platform)
            bindings.append(registration.deviceID)
            bindings.append(registration.tokenType)
            bindings.append(Int32(clamping: maximumActiveDevices))
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row {
            try row.decode(Row.self)
        }
    }

    /// The batch as columns, one array per argument of `push_register_device`, called once per
    /// element in the arrays' order. PostgresNIO encodes no NULL array elements, so a batch's
    /// absent device ids travel as a flag beside an empty string.
    struct RegisterBatchStatement: PostgresPreparedStatement {
        static let name = "push_register_device_batch"
        static let sql = """
            SELECT g.ord, r.id, r.user_id, r.app_id, r.token, r.token_type, r.platform, r.device_id, r.is_active,
                   r.last_used_at, r.created_at, r.created
              FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::boolean[], $7::text[])
                   WITH ORDINALITY AS g(user_id, app_id, token, platform, device_id, has_device_id, token_type, ord)
             CROSS JOIN LATERAL push_register_device(
                   g.user_id, g.app_id, g.token, g.platform, CASE WHEN g.has_device_id THEN g.device_id END,
                   g.token_type, $8) AS r
             ORDER BY g.ord
            """
        typealias Row = (Int64, RegisterStatement.Row)

        let batch: [Registration]
        let maximumActiveDevices: Int

        func makeBindings() throws -> PostgresBindings {
            var bindings = PostgresBindings(capacity: 8)
            bindings.append(batch.map(\.userID))
            bindings.append(batch.map(\.appID))
            bindings.append(batch.map(\.device.token))
            bindings.append(batch.map(\.device.platform))
            bindings.append(batch.map { $0.device.deviceID ?? "" })
            bindings.append(batch.map { $0.device.deviceID != nil })
            bindings.append(batch.map(\.device.tokenType))
            bindings.append(Int32(clamping: maximumActiveDevices))
            return bindings
        }

        func decodeRow(_ row: PostgresRow) throws -> Row {
            let (ord, id, userID, appID, token, tokenType, platform, deviceID, isActive, lastUsedAt, createdAt, created) =
                try row.decode((Int64, Int64, Int64, Int64, String, TokenType, Platform, String?, Bool, Date, Date, Bool).self)
            return (ord, (id, userID, appID, token, tokenType, platform, deviceID, isActive, lastUsedAt, createdAt, created))
        }
    }

    /// Soft-deactivates the user's device (reason `logout`), and with it the same user's other
    /// active tokens on that `deviceId`: a logout racing a token refresh wins (the refresh's new
    /// row would otherwise keep the logged-out phone receiving). Idempotent: an already inactive
    /// device is fine. Returns false when the id is not one of this user's devices in this app.
    public func deactivate(deviceID id: Int64, userID: Int64, appID: Int64, reason: DeactivationReason = .logout, logger: Logger)
        async throws -> Bool
    {
        // Behind the user's lock, as registrations: see push_deactivate_device.
        let rows = try await Self.retryingConflicts(logger: logger) {
            try await DatabaseStatement.run(
                "SELECT push_deactivate_device(\(id), \(userID), \(appID), \(reason))", on: client, logger: logger)
        }
        return try rows.first?.decode(Bool.self) ?? false
    }

    /// The app's devices (one user's, when `userID` is given), active ones first, most recently
    /// used first.
    public func devices(appID: Int64, userID: Int64?, limit: Int? = nil, logger: Logger) async throws -> [Device] {
        let rows = try await DatabaseStatement.run(
            """
            SELECT id, user_id, app_id, token, token_type, platform, device_id, is_active,
                   last_used_at, created_at, deactivated_at, deactivation_reason
              FROM push_devices
             WHERE app_id = \(appID) AND (\(userID)::bigint IS NULL OR user_id = \(userID))
             ORDER BY is_active DESC, last_used_at DESC, id DESC
             LIMIT \(limit)
            """, on: client, logger: logger)
        return try rows.map { try Self.device($0.decode(Self.DeviceRow.self)) }
    }

    /// One page of a user's devices in an app, active or not.
    public struct Page: Sendable, Equatable {
        public let devices: [Device]
        /// The `below` of the next page; nil on the last.
        public let nextCursor: Int64?

        public init(devices: [Device], nextCursor: Int64?) {
            self.devices = devices
            self.nextCursor = nextCursor
        }
    }

    /// The user's devices in the app, newest registration first (by id), at most `limit`, with
    /// ids below `cursor` when given. Ids never change, so registrations and refreshes made
    /// while a client pages never shift a page: nothing is listed twice or skipped, except the
    /// rows registered after the walk began, which belong before its first page.
    public func page(appID: Int64, userID: Int64, below cursor: Int64?, limit: Int, logger: Logger) async throws -> Page {
        precondition(limit > 0)
        let rows = try await DatabaseStatement.run(
            """
            SELECT id, user_id, app_id, token, token_type, platform, device_id, is_active,
                   last_used_at, created_at, deactivated_at, deactivation_reason
              FROM push_devices
             WHERE app_id = \(appID) AND user_id = \(userID) AND (\(cursor)::bigint IS NULL OR id < \(cursor))
             ORDER BY id DESC
             LIMIT \(limit + 1)
            """, on: client, logger: logger)
        var devices = try rows.map { try Self.device($0.decode(Self.DeviceRow.self)) }
        guard devices.count > limit else { return Page(devices: devices, nextCursor: nil) }
        devices.removeLast()
        return Page(devices: devices, nextCursor: devices.last?.id)
    }

    private typealias DeviceRow = (Int64, Int64, Int64, String, TokenType, Platform, String?, Bool, Date, Date, Date?, DeactivationReason?)

    private static func device(_ row: DeviceRow) -> Device {
        Device(
            id: row.0, userID: row.1, appID: row.2, token: row.3, tokenType: row.4, platform: row.5, deviceID: row.6, isActive: row.7,
            lastUsedAt: row.8, createdAt: row.9, deactivatedAt: row.10, deactivationReason: row.11)
    }

    /// A deadlock or serialization failure between registrations touching the
    /// same rows through different locks is retried: the client must never see it.
    static func retryingConflicts<T: Sendable>(logger: Logger, attempts: Int = 5, _ body: () async throws -> T) async throws -> T {
        var attempt = 1
        while true {
            do {
                return try await body()
            } catch  where attempt < attempts && [.deadlockDetected, .serializationFailure].contains(DatabaseErrorText.sqlState(error)) {
                logger.debug("registration conflict, retrying", metadata: ["push.attempt": "\(attempt)"])
                attempt += 1
                try await Task.sleep(for: .milliseconds(Int.random(in: 1...(5 * attempt))))
            }
        }
    }
}
