#!/usr/bin/env bash
# Build and run every test: gcc build (warnings are errors), clang build,
# the suite again under AddressSanitizer + UndefinedBehaviorSanitizer, and
# the threaded tests under ThreadSanitizer.
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
# the 4 GiB message test runs in the plain build only (8 GiB under ASan's allocator);
# the openib-tight variants too (the emulated openib runs under ASan as openib-emul;
# the credit-starved repeats of the same code cost 30 s of the 10-minute budget)
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build/test-asan --output-on-failure -j"$jobs" -E 'itest_rndv_huge|\.openib-tight$'

echo "== ThreadSanitizer: the threaded tests (pscom_init_thread, every transport)"
cmake -S . -B build/test-tsan -DPSCOM_WERROR=ON -DPSCOM_TSAN=ON -DCMAKE_BUILD_TYPE=Debug >/dev/null
cmake --build build/test-tsan -j"$jobs"
# UCX_MEM_EVENTS=no: UCX's libucm hooks madvise(), which glibc calls for a
# thread's stack after ThreadSanitizer has let go of the thread; the hook's
# rwlock then crashes TSan's interceptor (any TSan-built program with UCX).
UCX_MEM_EVENTS=no TSAN_OPTIONS=halt_on_error=1 \
  ctest --test-dir build/test-tsan --output-on-failure -j"$jobs" -R '^itest_(threads|threads_conns|threads_close|rma_threads|ucp)\.|^itest_threads_exit\.ucp-|^itest_threads_wake$'
