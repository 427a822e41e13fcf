import Crypto
import Foundation
import NIOSSL
import X509

/// A throwaway certificate authority and a server certificate it signed for the loopback names, generated at
/// every start so that no key material ever lives in the repository.
struct LoopbackCertificates {
    let caCertificatePEM: String
    let serverCertificate: NIOSSLCertificate
    let serverPrivateKey: NIOSSLPrivateKey

    enum GenerationError: Error {
        case encoding(any Error)
    }

    /// `extraHost` (the configured bind host) is added to the subject alternative names when it is not a
    /// wildcard address.
    static func generate(extraHost: String, now: Date = Date()) throws(GenerationError) -> LoopbackCertificates {
        do {
            let caKey = P256.Signing.PrivateKey()
            let caPrivateKey = Certificate.PrivateKey(caKey)
            let caName = try DistinguishedName {
                OrganizationName("fcm-emulator")
                CommonName("fcm-emulator test CA")
            }
            let caKeyIdentifier = SubjectKeyIdentifier(hash: caPrivateKey.publicKey)
            // Backdated so that a client clock slightly behind still accepts the certificates.
            let notBefore = now.addingTimeInterval(-3600)
            let notAfter = now.addingTimeInterval(365 * 24 * 3600)
            let caCertificate = try Certificate(
                version: .v3,
                serialNumber: Certificate.SerialNumber(),
                publicKey: caPrivateKey.publicKey,
                notValidBefore: notBefore,
                notValidAfter: notAfter,
                issuer: caName,
                subject: caName,
                signatureAlgorithm: .ecdsaWithSHA256,
                extensions: try Certificate.Extensions {
                    Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                    Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                    caKeyIdentifier
                },
                issuerPrivateKey: caPrivateKey
            )

            let serverKey = P256.Signing.PrivateKey()
            let serverPrivateKey = Certificate.PrivateKey(serverKey)
            let serverCertificate = try Certificate(
                version: .v3,
                serialNumber: Certificate.SerialNumber(),
                publicKey: serverPrivateKey.publicKey,
                notValidBefore: notBefore,
                notValidAfter: notAfter,
                issuer: caName,
                subject: try DistinguishedName { CommonName("localhost") },
                signatureAlgorithm: .ecdsaWithSHA256,
                extensions: try Certificate.Extensions {
                    Critical(BasicConstraints.notCertificateAuthority)
                    Critical(KeyUsage(digitalSignature: true, keyEncipherment: true))
                    try ExtendedKeyUsage([.serverAuth])
                    SubjectKeyIdentifier(hash: serverPrivateKey.publicKey)
                    AuthorityKeyIdentifier(keyIdentifier: caKeyIdentifier.keyIdentifier)
                    SubjectAlternativeNames(subjectAlternativeNames(extraHost: extraHost))
                },
                issuerPrivateKey: caPrivateKey
            )

            return LoopbackCertificates(
                caCertificatePEM: try caCertificate.serializeAsPEM().pemString,
                serverCertificate: try NIOSSLCertificate(bytes: Array(serverCertificate.serializeAsPEM().pemString.utf8), format: .pem),
                serverPrivateKey: try NIOSSLPrivateKey(bytes: Array(serverKey.pemRepresentation.utf8), format: .pem)
            )
        } catch {
            throw .encoding(error)
        }
    }

    /// TLS 1.2+ server configuration; ALPN (h2, http/1.1) is added by `EmulatorServerChannel`.
    var serverTLSConfiguration: TLSConfiguration {
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: [.certificate(serverCertificate)],
            privateKey: .privateKey(serverPrivateKey)
        )
        // A connection closed at shutdown waits this long for the client's close_notify (5 s by
        // default): clients that keep a connection open need not answer it, and a test's emulator stops fast.
        configuration.shutdownTimeout = .milliseconds(500)
        return configuration
    }

    private static func subjectAlternativeNames(extraHost: String) -> [GeneralName] {
        var names: [GeneralName] = [
            .dnsName("localhost"),
            .ipAddress(.init(contentBytes: [127, 0, 0, 1])),
            .ipAddress(.init(contentBytes: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1])),
        ]
        let wildcardOrLoopback: Set = ["", "0.0.0.0", "::", "localhost", "127.0.0.1", "::1"]
        guard !wildcardOrLoopback.contains(extraHost) else { return names }
        if let address = ipv4Bytes(extraHost) {
            names.append(.ipAddress(.init(contentBytes: address[...])))
        } else {
            names.append(.dnsName(extraHost))
        }
        return names
    }

    private static func ipv4Bytes(_ host: String) -> [UInt8]? {
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        let bytes = parts.compactMap { UInt8($0) }
        return bytes.count == 4 ? bytes : nil
    }
}
