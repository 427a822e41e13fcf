#!/usr/bin/env bash
# The cost of the worker's FCM body per send, the one JSON fast path (docs/internals.md#json):
# PreparedMessage's splicing against WireJSON encoding the whole body. A release build of the
# tests in its own scratch directory, so that it disturbs no other build.
set -euo pipefail
cd "$(dirname "$0")/../.."
scratch=.build/json-bench
swift build -c release --build-tests -Xswiftc -enable-testing --scratch-path "$scratch"
JSON_BENCH=1 swift test -c release --skip-build --scratch-path "$scratch" --filter FCMBodyCostTests 2>&1 | grep 'FCM body per send'
