#!/usr/bin/env bash
# Fuzz the receive side of a connection (test/fuzz/fuzz_stream.c) with
# libFuzzer, under AddressSanitizer and UndefinedBehaviorSanitizer, for
# FUZZ_TIME seconds (default 300). The ctest test fuzz_stream runs the same
# target on a fixed set of generated inputs; this explores further.
#
#   scripts/fuzz.sh                 build (clang) into build/fuzz and fuzz
#   scripts/fuzz.sh FILE...         replay inputs (e.g. a saved crash)
#
# The corpus grows in build/fuzz/corpus (seeded with 500 generated inputs),
# crashes are saved as build/fuzz/crash-*. Extra libFuzzer options:
# FUZZ_ARGS (e.g. "-jobs=2 -workers=2").
set -euo pipefail
cd "$(dirname "$0")/.."

build=build/fuzz
CC=clang BUILD_DIR=$build scripts/setup.sh -DPSCOM_FUZZ=ON -DPSCOM_SANITIZE=ON \
  -DCMAKE_BUILD_TYPE=Debug -DPSCOM_WERROR=ON
target=$PWD/$build/test/fuzz/fuzz_stream_libfuzzer
if [ $# -gt 0 ]; then
  exec "$target" "$@"
fi
mkdir -p "$build/corpus"
if [ -z "$(ls -A "$build/corpus")" ]; then
  "$PWD/$build/test/fuzz/fuzz_stream" --corpus "$build/corpus" 500
fi
# huge announced lengths: allocations ASan refuses (fuzz_stream.c) print a
# warning each; they are expected, so they are filtered out
cd "$build"
# shellcheck disable=SC2086 # FUZZ_ARGS is a list of options
"$target" -max_total_time="${FUZZ_TIME:-300}" -max_len=4096 -print_final_stats=1 \
  ${FUZZ_ARGS:-} corpus 2>&1 | grep --line-buffered -v 'failed to allocate'
