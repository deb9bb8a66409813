#!/bin/sh
# install_consumer.sh - "compiles against the installed header" test.
#
# usage: install_consumer.sh CMAKE BUILD_DIR SOURCE CC [CXX] [EXTRA_FLAGS] [PKG_CONFIG]
#
# Installs the build tree into a fresh temporary prefix (cmake --install),
# then builds SOURCE (a program that includes only <pscom.h>) with the
# flags pkg-config reports for that prefix:
#   1. CC, default warnings
#   2. CC -Wall -Wextra -Werror
#   3. CXX -x c++ -Wall -Wextra -Werror (if a C++ compiler was given)
# and runs each binary with LD_LIBRARY_PATH pointing into the prefix.
# EXTRA_FLAGS (e.g. sanitizer flags of the build) are added to every
# compile. Safe to run in parallel: everything lives in a mktemp directory.
set -eu

cmake_cmd=$1
build=$2
src=$3
cc=$4
cxx=${5:-}
extra=${6:-}
pkgconfig=${7:-pkg-config}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/pscom-consumer.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
prefix=$tmp/prefix

echo "== cmake --install $build --prefix $prefix"
if ! "$cmake_cmd" --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1; then
    cat "$tmp/install.log"
    echo "FAILED: cmake --install"
    exit 1
fi

test -f "$prefix/include/pscom.h" || { echo "FAILED: no include/pscom.h in the prefix"; exit 1; }
pc=$(find "$prefix" -name pscom.pc | head -n 1)
test -n "$pc" || { echo "FAILED: no pscom.pc installed"; exit 1; }
lib=$(find "$prefix" -name 'libpscom.so*' | head -n 1)
test -n "$lib" || { echo "FAILED: no libpscom.so installed"; exit 1; }
libdir=$(dirname "$lib")

PKG_CONFIG_PATH=$(dirname "$pc")
export PKG_CONFIG_PATH
"$pkgconfig" --exists pscom || { echo "FAILED: pkg-config does not find pscom"; exit 1; }

# The .pc file carries the configure-time prefix; a relocated install
# (cmake --install --prefix) is addressed by overriding the variable.
pc_prefix=$("$pkgconfig" --variable=prefix pscom)
if [ "$pc_prefix" != "$prefix" ]; then
    echo "note: pscom.pc prefix is '$pc_prefix' (configure time), overriding with the install prefix"
fi
flags=$("$pkgconfig" --define-variable=prefix="$prefix" --cflags --libs pscom)
echo "== pkg-config --cflags --libs pscom: $flags"
case "$flags" in
    *"$prefix"*) ;;
    *) echo "FAILED: pkg-config flags do not point into the prefix"; exit 1 ;;
esac

run() {
    name=$1
    shift
    echo "== build $name: $*"
    "$@" || { echo "FAILED: compiling $name"; exit 1; }
    echo "== run $name"
    LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$tmp/$name" ||
        { echo "FAILED: running $name"; exit 1; }
}

# shellcheck disable=SC2086  # flags are word lists on purpose
run consumer_c "$cc" $extra "$src" $flags -o "$tmp/consumer_c"
# shellcheck disable=SC2086
run consumer_c_werror "$cc" -Wall -Wextra -Werror $extra "$src" $flags -o "$tmp/consumer_c_werror"
if [ -n "$cxx" ]; then
    # shellcheck disable=SC2086
    run consumer_cxx "$cxx" -x c++ -Wall -Wextra -Werror $extra "$src" -x none $flags \
        -o "$tmp/consumer_cxx"
else
    echo "note: no C++ compiler, C++ build skipped"
fi
echo "PASSED"
