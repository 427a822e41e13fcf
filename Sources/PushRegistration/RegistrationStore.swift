import Foundation

/// Where the registration record is kept between launches: the pending registration and the
/// deactivations owed survive the app being killed. One small JSON document, read once at start
/// and replaced after every change. It holds access tokens taken at sign-out (until their
/// deactivation is sent), so keep it where the app keeps its own session.
public protocol RegistrationStore: Sendable {
    /// The document last written, or nil when there is none yet.
    func read() throws -> Data?
    /// Replaces the document, whole or not at all.
    func write(_ document: Data) throws
}

/// A file, replaced atomically (written beside it, then renamed over it): a kill mid-write leaves
/// the previous document. Readable by this user only; on iOS, protected until the first unlock.
public struct FileRegistrationStore: RegistrationStore {
    public let url: URL

    public init(url: URL) {
        self.url = url
    }

    /// `push-registration.json` in Application Support (created when missing).
    public static func standard() throws -> FileRegistrationStore {
        let folder = try FileManager.default.url(for: .applicationSupportDirectory, in: .userDomainMask, appropriateFor: nil, create: true)
        return FileRegistrationStore(url: folder.appendingPathComponent("push-registration.json"))
    }

    public func read() throws -> Data? {
        guard FileManager.default.fileExists(atPath: url.path) else { return nil }
        return try Data(contentsOf: url)
    }

    public func write(_ document: Data) throws {
        // Created 0600 beside the document and renamed over it, so that no moment exists where
        // the file is readable by others or half written.
        let temporary = url.deletingLastPathComponent().appendingPathComponent(".\(url.lastPathComponent).\(UUID().uuidString)")
        var attributes: [FileAttributeKey: Any] = [.posixPermissions: 0o600]
        #if os(iOS) || os(tvOS) || os(watchOS) || os(visionOS)
            // Readable after the first unlock: token refreshes arrive while the phone is locked.
            attributes[.protectionKey] = FileProtectionType.completeUntilFirstUserAuthentication
        #endif
        guard FileManager.default.createFile(atPath: temporary.path, contents: document, attributes: attributes) else {
            throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: temporary.path])
        }
        guard rename(temporary.path, url.path) == 0 else {
            let code = POSIXErrorCode(rawValue: errno) ?? .EIO
            try? FileManager.default.removeItem(at: temporary)
            throw POSIXError(code)
        }
    }
}

#if canImport(Darwin)
    /// A key of `UserDefaults` (standard by default). Simple, and backed up with the app's
    /// settings; prefer `FileRegistrationStore` when the access tokens of pending logouts should
    /// stay out of the preferences plist.
    public struct UserDefaultsRegistrationStore: RegistrationStore, @unchecked Sendable {
        // UserDefaults is thread-safe; it is not marked Sendable.
        let defaults: UserDefaults
        public let key: String

        public init(defaults: UserDefaults = .standard, key: String = "push-registration") {
            self.defaults = defaults
            self.key = key
        }

        public func read() throws -> Data? { defaults.data(forKey: key) }

        public func write(_ document: Data) throws { defaults.set(document, forKey: key) }
    }
#endif
