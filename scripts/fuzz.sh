#!/usr/bin/env bash
# Fuzz what a peer can send (test/fuzz) with libFuzzer, under
# AddressSanitizer and UndefinedBehaviorSanitizer, for FUZZ_TIME seconds
# (default 300). The ctest tests fuzz_stream, fuzz_precon, fuzz_connect,
# fuzz_ondemand, fuzz_shm, fuzz_ucp and fuzz_openib run the same targets on
# a fixed set of generated inputs; this explores further.
#
#   scripts/fuzz.sh [TARGET]            build (clang) into build/fuzz and fuzz
#   scripts/fuzz.sh TARGET FILE...      replay inputs (e.g. a saved crash)
#
# TARGET: stream (default; the receive side of a connection), precon (the
# accept side of the handshake), connect (its connect side), ondemand (the
# on-demand part of the accept side), shm (any packets in an shm ring),
# ucp (any UCX messages to a ucp connection; needs UCX, libucx-dev) or
# openib (any packets on an openib connection's queue pair, over the
# software HCA of test/verbs_emul; needs libibverbs-dev for its headers).
# The corpus grows in build/fuzz/corpus-TARGET (seeded with 500 generated inputs),
# crashes are saved as build/fuzz/crash-*. Extra libFuzzer options:
# FUZZ_ARGS (e.g. "-jobs=2 -workers=2").
set -euo pipefail
cd "$(dirname "$0")/.."

target=${1:-stream}
[ $# -gt 0 ] && shift
case $target in
stream | precon | connect | ondemand | shm | ucp | openib) ;;
*)
  echo "fuzz.sh: unknown target '$target' (stream, precon, connect, ondemand, shm, ucp, openib)" >&2
  exit 2
  ;;
esac

build=build/fuzz
# only the fuzz targets: clang does not link its sanitizer runtimes into
# shared objects, so libpscom.so and the plugin modules would not link here
CC=clang BUILD_DIR=$build SETUP_TARGETS="fuzz_$target fuzz_${target}_libfuzzer" scripts/setup.sh \
  -DPSCOM_FUZZ=ON -DPSCOM_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug -DPSCOM_WERROR=ON
bin=$PWD/$build/test/fuzz/fuzz_$target
if [ "$target" = ucp ]; then
  # as for the ucp tests (test/integration/CMakeLists.txt): LeakSanitizer
  # and the dynamic TLS of UCX's dlopen()ed transports
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}intercept_tls_get_addr=0:fast_unwind_on_malloc=0"
  export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$PWD/test/integration/ucp_lsan.supp"
fi
if [ $# -gt 0 ]; then
  exec "${bin}_libfuzzer" "$@"
fi
corpus=$build/corpus-$target
mkdir -p "$corpus"
if [ -z "$(ls -A "$corpus")" ]; then
  "$bin" --corpus "$corpus" 500
fi
cd "$build"
# Huge announced lengths make allocations that ASan refuses by design
# (fuzz_asan.c); each prints a warning, filtered out here.
# shellcheck disable=SC2086 # FUZZ_ARGS is a list of options
"${bin}_libfuzzer" -max_total_time="${FUZZ_TIME:-300}" -max_len=4096 -print_final_stats=1 \
  ${FUZZ_ARGS:-} "corpus-$target" 2>&1 | { grep --line-buffered -v 'failed to allocate' || true; }
