import Foundation
import Testing

@testable import PushRegistration

@Suite("Registration store")
struct RegistrationStoreTests {
    static func folder() throws -> URL {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("registration-store-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        return folder
    }

    @Test func aFileIsReplacedWholeAndReadableByItsOwnerOnly() throws {
        let folder = try Self.folder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let store = FileRegistrationStore(url: folder.appendingPathComponent("push-registration.json"))
        #expect(try store.read() == nil)
        try store.write(Data("first".utf8))
        try store.write(Data("second, longer".utf8))
        #expect(try store.read() == Data("second, longer".utf8))
        let attributes = try FileManager.default.attributesOfItem(atPath: store.url.path)
        #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
        // Nothing left beside it.
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path) == ["push-registration.json"])
    }

    @Test func aFolderThatDoesNotExistIsAnErrorAndWritesNothing() throws {
        let folder = try Self.folder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let store = FileRegistrationStore(url: folder.appendingPathComponent("missing/push-registration.json"))
        #expect(throws: (any Error).self) { try store.write(Data("x".utf8)) }
        #expect(try FileManager.default.contentsOfDirectory(atPath: folder.path).isEmpty)
    }

    /// The registrar keeps its record there: what it writes, a new registrar on the same store
    /// reads back (the restart test against push-api sends what it owes).
    @Test func theRecordSurvivesANewRegistrar() async throws {
        let folder = try Self.folder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let store = FileRegistrationStore(url: folder.appendingPathComponent("push-registration.json"))
        let configuration = PushRegistrar.Configuration(baseURL: URL(string: "http://127.0.0.1:9")!, platform: .ios, log: .silent)
        let first = try PushRegistrar(configuration: configuration, store: store)
        await first.signedIn(account: "alice") { _ in "jwt" }
        await first.fcmTokenReceived("fcm-token-0123456789")
        let second = try PushRegistrar(configuration: configuration, store: store)
        #expect(await second.installationID == first.installationID)
        #expect(await second.status.phase == .waitingForSession)
    }

    @Test func anUnreadableStoreIsAClearErrorAndIsLeftAsItIs() throws {
        let folder = try Self.folder()
        defer { try? FileManager.default.removeItem(at: folder) }
        let store = FileRegistrationStore(url: folder.appendingPathComponent("push-registration.json"))
        try store.write(Data("{not json".utf8))
        let configuration = PushRegistrar.Configuration(baseURL: URL(string: "http://127.0.0.1:9")!, platform: .ios, log: .silent)
        #expect {
            try PushRegistrar(configuration: configuration, store: store)
        } throws: { error in
            guard case .unreadableStore(let reason) = error as? PushRegistrationError else { return false }
            return !reason.isEmpty
        }
        #expect(try store.read() == Data("{not json".utf8))
    }
}
