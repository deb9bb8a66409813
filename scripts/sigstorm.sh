#!/usr/bin/env bash
# Run ctest with a no-op signal every SIG_US microseconds (default 200) in
# every process (test/tools/sigstorm.c, through LD_PRELOAD; no SA_RESTART):
# every blocking system call of the library and of the tests may fail with
# EINTR. Not for the sanitizer build (ASan wants to come first in the
# preload list).
#
#   BUILD_DIR=build scripts/sigstorm.sh [ctest args...]
#   default args: -j2 -E 'rndv_huge|valgrind|install_consumer' (valgrind, the 4 GiB test,
#   and the install test, whose compiler and cmake do not retry EINTR: gcc
#   stops with "failed to get exit status: Interrupted system call")
#
# On 2026-11-28 all of the suite passed so but itest_install_consumer,
# whose compiler driver fails under the storm itself (doc/architecture.md,
# *Progress and waiting*).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
[ -d "$build" ] || { echo "sigstorm: $build not built (run scripts/setup.sh)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
${CC:-cc} -O2 -shared -fPIC -o "$tmp/sigstorm.so" test/tools/sigstorm.c -lrt -lpthread
[ $# -gt 0 ] || set -- -j2 -E 'rndv_huge|valgrind|install_consumer'
LD_PRELOAD="$tmp/sigstorm.so" ctest --test-dir "$build" --timeout 200 "$@"
