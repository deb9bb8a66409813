#!/usr/bin/env bash
# Build and run every test: gcc build (warnings are errors), clang build,
# and the suite again under AddressSanitizer + UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

BUILD_DIR=build/test-gcc scripts/setup.sh -DPSCOM_WERROR=ON
ctest --test-dir build/test-gcc --output-on-failure -j"$jobs"

echo "== clang build (warnings are errors)"
CC=clang cmake -S . -B build/test-clang -DPSCOM_WERROR=ON >/dev/null
cmake --build build/test-clang -j"$jobs"

echo "== AddressSanitizer + UndefinedBehaviorSanitizer"
cmake -S . -B build/test-asan -DPSCOM_WERROR=ON -DPSCOM_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build/test-asan -j"$jobs"
# the 4 GiB message test runs in the plain build only (8 GiB under ASan's allocator)
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build/test-asan --output-on-failure -j"$jobs" -E 'itest_rndv_huge'
