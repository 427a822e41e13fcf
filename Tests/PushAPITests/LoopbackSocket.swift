import Glibc

/// A TCP socket connected to 127.0.0.1:`port`, for tests that speak to push-api the way a
/// broken or hostile client does (connect() on loopback completes in the kernel).
enum LoopbackSocket {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    static func connect(port: Int) throws -> Int32 {
        let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard socket >= 0 else { throw Failure(description: "socket: errno \(errno)") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(socket, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            Glibc.close(socket)
            throw Failure(description: "connect: errno \(errno)")
        }
        return socket
    }
}
