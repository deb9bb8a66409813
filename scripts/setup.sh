#!/usr/bin/env bash
# Install the build dependencies (Debian 12 packages) if missing, then
# configure and build into ${BUILD_DIR:-build}. Extra arguments go to cmake;
# SETUP_TARGETS (a list) builds only those targets.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(build-essential cmake pkg-config clang libcmocka-dev libibverbs-dev librdmacm-dev
      libucx-dev ucx-utils valgrind)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

build=${BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
# shellcheck disable=SC2086 # SETUP_TARGETS is a list of targets
cmake --build "$build" -j"$(nproc)" ${SETUP_TARGETS:+--target $SETUP_TARGETS}
