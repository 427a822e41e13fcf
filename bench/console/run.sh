#!/usr/bin/env bash
# The admin console's pages over a million delivery rows, against issue 26's budget of 100 ms a
# page (docs/benchmarks.md): Tests/PushAPITests/Console/ConsoleScaleTests.swift seeds the rows in
# the suite's throwaway PostgreSQL and times each page, best of four, through push-api's router.
#
#   bench/console/run.sh            a release build of the tests in its own scratch directory
#                                   (shared with bench/json), so that it disturbs no other build
#   BUILD=debug bench/console/run.sh    the suite's debug build as it is (slower pages: an upper bound)
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ ${BUILD:-release} == debug ]]; then
    set -- --skip-build
else
    scratch=.build/json-bench
    swift build -c release --build-tests -Xswiftc -enable-testing --scratch-path "$scratch"
    set -- -c release --skip-build --scratch-path "$scratch"
fi
CONSOLE_BENCH=1 swift test "$@" --filter ConsoleScaleTests 2>&1 | grep -E 'console page|Test run'
