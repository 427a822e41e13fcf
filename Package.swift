// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "push-service",
    platforms: [.macOS(.v14), .iOS(.v17)],
    products: [
        .executable(name: "push-api", targets: ["push-api"]),
        .executable(name: "pushctl", targets: ["pushctl"]),
        .executable(name: "push-worker", targets: ["push-worker"]),
        .executable(name: "fcm-emulator", targets: ["fcm-emulator"]),
        .library(name: "DeviceRegistry", targets: ["DeviceRegistry"]),
        // What a mobile app embeds to register its FCM token with push-api.
        .library(name: "PushRegistration", targets: ["PushRegistration"]),
    ],
    // Exact versions: a build is reproducible from this file alone (Package.resolved stays out
    // of git, since commit ids differ between mirrors).
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", exact: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache.git", exact: "2.1.1"),
        .package(url: "https://github.com/vapor/postgres-nio.git", exact: "1.33.2"),
        .package(url: "https://github.com/vapor/jwt-kit.git", exact: "5.8.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", exact: "4.5.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", exact: "2.13.0"),
        .package(url: "https://github.com/apple/swift-log.git", exact: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", exact: "2.4.1"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", exact: "1.8.2"),
        .package(url: "https://github.com/apple/swift-nio.git", exact: "2.101.3"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", exact: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", exact: "1.46.0"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", exact: "1.35.2"),
        .package(url: "https://github.com/apple/swift-http-types.git", exact: "1.8.0"),
        .package(url: "https://github.com/swift-server/async-http-client.git", exact: "1.37.0"),
        .package(url: "https://github.com/apple/swift-certificates.git", exact: "1.21.1"),
        // Tests only: deploy/'s YAML is parsed by the test that keeps it true.
        .package(url: "https://github.com/jpsim/Yams.git", exact: "6.2.2"),
    ],
    targets: [
        // JSON, timestamps and base64 as they cross the wire: Foundation only, used by every module.
        .target(name: "WireFormats"),
        // The core: device rules, the stores of apps, jobs and deliveries, and the schema's migrations.
        .target(
            name: "DeviceRegistry",
            dependencies: [
                "WireFormats",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            resources: [.copy("Migrations")]
        ),
        // What every program needs around the core: environment settings, startup, logging, and the
        // database's configuration, reachability and deadlines.
        .target(
            name: "ServiceSupport",
            dependencies: [
                "DeviceRegistry",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        // The HTTP/2 client FCM is reached through: connections, streams, flow control. NIO only.
        .target(
            name: "FCMTransport",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
            ]
        ),
        // The registration HTTP API.
        .target(
            name: "PushAPI",
            dependencies: [
                "DeviceRegistry", "ServiceSupport", "WireFormats",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                // The admin console's templates.
                .product(name: "Mustache", package: "swift-mustache"),
                // The console's compose preview is the FCM request the worker's own PreparedMessage writes.
                "PushDispatch",
            ],
            resources: [.copy("openapi.yaml"), .copy("Console/Templates"), .copy("Console/Assets")]
        ),
        // The dispatcher: queue claims, OAuth access tokens, the FCM HTTP v1 client, outcomes.
        .target(
            name: "PushDispatch",
            dependencies: [
                "DeviceRegistry", "ServiceSupport", "WireFormats", "FCMTransport",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "push-worker",
            dependencies: [
                "PushDispatch", "DeviceRegistry", "ServiceSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(
            name: "push-api",
            dependencies: [
                "PushAPI", "DeviceRegistry", "ServiceSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        .executableTarget(
            name: "pushctl",
            dependencies: [
                "DeviceRegistry", "ServiceSupport", "WireFormats",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // A stand-in for FCM HTTP v1 and Google's OAuth token endpoint, for tests, benchmarks and
        // developers of client backends: a real HTTP/1.1 + HTTP/2 server over TLS on loopback.
        .target(
            name: "FCMEmulator",
            dependencies: [
                "WireFormats",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            // FCM's answers as files, written from its documentation: the emulator's canned answers.
            resources: [.copy("FCMAnswers")]
        ),
        .executableTarget(
            name: "fcm-emulator",
            dependencies: [
                "FCMEmulator",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]
        ),
        // The app side of registration: the client an iOS (or macOS, or Linux) app embeds. Foundation
        // only, and none of this package's other modules: app teams take it without the server.
        .target(name: "PushRegistration"),
        // A throwaway PostgreSQL cluster (or TEST_DATABASE_URL) and per-test databases.
        .target(
            name: "TestSupport",
            dependencies: [
                "DeviceRegistry", "ServiceSupport",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
                // TokenMint signs access tokens.
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                // WebDriver's JSON over HTTP, to chromedriver.
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
            ],
            path: "Tests/TestSupport"
        ),
        .testTarget(name: "WireFormatsTests", dependencies: ["WireFormats"]),
        .testTarget(
            name: "ServiceSupportTests",
            dependencies: ["ServiceSupport", "DeviceRegistry", "TestSupport", .product(name: "PostgresNIO", package: "postgres-nio")]),
        .testTarget(
            name: "FCMTransportTests",
            dependencies: [
                "FCMTransport",
                "FCMEmulator",
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
            ]
        ),
        .testTarget(
            name: "DeviceRegistryTests",
            dependencies: ["DeviceRegistry", "TestSupport", .product(name: "PostgresNIO", package: "postgres-nio")]
        ),
        .testTarget(
            name: "PushAPITests",
            dependencies: [
                "PushAPI", "DeviceRegistry", "ServiceSupport", "WireFormats", "TestSupport",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ]
        ),
        .testTarget(
            name: "FCMEmulatorTests",
            dependencies: [
                "FCMEmulator", "TestSupport",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            // Run by FirebaseAdminSDKTests with the SDK's own Python, not compiled.
            exclude: ["firebase_admin_check.py"]
        ),
        .testTarget(
            name: "PushDispatchTests",
            dependencies: [
                "PushDispatch", "DeviceRegistry", "ServiceSupport", "FCMTransport", "TestSupport", "FCMEmulator",
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
            ],
            // FCM answers the outcome table test reads by path (beside the emulator's own).
            exclude: ["Fixtures"]
        ),
        .testTarget(
            name: "PushCTLTests",
            dependencies: [
                "DeviceRegistry", "ServiceSupport", "TestSupport",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The console in headless Chromium (through chromedriver) against the built programs.
        .testTarget(
            name: "ConsoleBrowserTests",
            dependencies: [
                "DeviceRegistry", "TestSupport",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The client library: its state machine without I/O, and the library against push-api and
        // PostgreSQL as the suite runs them.
        .testTarget(
            name: "PushRegistrationTests",
            dependencies: [
                "PushRegistration", "DeviceRegistry", "TestSupport",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "DeployTests",
            dependencies: [
                "PushAPI", "PushDispatch", "FCMEmulator", "DeviceRegistry", "ServiceSupport", "TestSupport",
                .product(name: "Yams", package: "Yams"),
                // docs/contract.md is checked against the routers and a migrated database.
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
