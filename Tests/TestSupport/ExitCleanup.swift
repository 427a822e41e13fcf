import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A server a test runs as a child process (nginx, pgbouncer).
public protocol ChildServer: Sendable {
    var childProcess: Process { get }
    func removeFiles()
}

extension ChildServer {
    /// Stops the server (SIGTERM: it closes its connections at once; SIGKILL after 10 s) and
    /// waits for its exit. Its folder and logs stay until `removeFiles()`.
    public func stop() async {
        if await childProcess.terminate(within: .seconds(10)) == nil { childProcess.waitUntilExit() }
    }
}

/// Stops, when the test process exits, every child server the tests left running (a failed
/// expectation or a thrown error skipped its stop).
enum ExitCleanup {
    private static let servers = Mutex<[any ChildServer]>([])

    static func register(_ server: any ChildServer) {
        let first = servers.withLock { list in
            list.append(server)
            return list.count == 1
        }
        if first {
            atexit {
                for server in ExitCleanup.servers.withLock({ $0 }) where server.childProcess.isRunning {
                    ExitCleanup.stop(server)
                }
            }
        }
    }

    /// SIGTERM rather than SIGKILL first: nginx's master stops its workers, which a killed
    /// master would leave behind holding the port; pgbouncer closes its sockets.
    private static func stop(_ server: any ChildServer) {
        let process = server.childProcess
        kill(process.processIdentifier, SIGTERM)
        for _ in 0..<150 where process.isRunning { usleep(20_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        server.removeFiles()
    }
}
