#!/usr/bin/env bash
# rma.sh - RMA put/get latency and bandwidth (bench/rma_pp.c) over tcp and
# shm, and eager vs rendezvous large-message bandwidth (pscom_pp with
# PSP_RENDEZVOUS=65536) over tcp and shm, between two local processes.
#
# Usage: bench/rma.sh [R]          (R = repetitions, default 3; or R=... in env)
#
# Environment:
#   R=3            repetitions; every measurement is run R times, interleaved
#   BUILD_DIR=dir  use this (configured) build tree; default <repo>/build-bench,
#                  configured as Release on first use
#   ITERS=2000     round trips of the 8 B RMA latency tests; pscom_pp runs
#                  max(50, ITERS*1024/size) round trips per size
#   BYTES=268435456  bytes moved per RMA bandwidth measurement
#   TRANSPORTS="tcp shm"  transports to try (a transport whose connections do
#                  not come up as that type is reported as n/a)
#   PIN=split      split: target/server on cpu 1, origin/client on cpu 0;
#                  none: no pinning
#   KEEP=1         keep the temporary directory with all raw outputs
#   VERBOSE=1      also print every repetition's numbers
#
# Output: two tables of medians and best-of-R values; see bench/README.md.
set -euo pipefail

die() { echo "rma.sh: $*" >&2; exit 1; }

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
R=${1:-${R:-3}}
ITERS=${ITERS:-2000}
BYTES=${BYTES:-268435456}
TRANSPORTS=${TRANSPORTS:-tcp shm}
PIN=${PIN:-split}
KEEP=${KEEP:-0}
VERBOSE=${VERBOSE:-0}
RMA_SIZES="65536 1048576 4194304"
PP_SIZES="1048576 4194304 16777216"
RNDV=65536

[[ $R =~ ^[1-9][0-9]*$ ]] || die "R must be a positive integer (got '$R')"
[[ $ITERS =~ ^[1-9][0-9]*$ ]] || die "ITERS must be a positive integer (got '$ITERS')"
[[ $BYTES =~ ^[1-9][0-9]*$ ]] || die "BYTES must be a positive integer (got '$BYTES')"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/pscom-rma-bench.XXXXXX")
SERVER_PID=
cleanup() {
    if [[ -n $SERVER_PID ]]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    if [[ $KEEP == 1 ]]; then echo "rma.sh: raw outputs kept in $TMP" >&2; else rm -rf "$TMP"; fi
}
trap cleanup EXIT

# --- build: libpscom + pscom_pp in BUILD_DIR, rma_pp against it ---------------
if [[ -n ${BUILD_DIR:-} ]]; then
    [[ -f $BUILD_DIR/CMakeCache.txt ]] || die "BUILD_DIR=$BUILD_DIR is not a configured build tree"
else
    BUILD_DIR=$REPO/build-bench
    if [[ ! -f $BUILD_DIR/CMakeCache.txt ]]; then
        cmake -S "$REPO" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DPSCOM_BUILD_TESTS=OFF \
            >"$TMP/cmake-configure.log" 2>&1 ||
            { cat "$TMP/cmake-configure.log" >&2; die "configuring $BUILD_DIR failed"; }
    fi
fi
cmake --build "$BUILD_DIR" --target pscom pscom_pp -j "$(nproc 2>/dev/null || echo 2)" \
    >"$TMP/cmake-build.log" 2>&1 ||
    { tail -n 40 "$TMP/cmake-build.log" >&2; die "building in $BUILD_DIR failed"; }
BUILD_TYPE=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")
[[ $BUILD_TYPE == Release ]] || echo "rma.sh: warning: $BUILD_DIR is a '$BUILD_TYPE' build, not Release" >&2
PP=$BUILD_DIR/bin/pscom_pp
LIBDIR=$BUILD_DIR/lib
[[ -x $PP ]] || die "no pscom_pp at $PP"
[[ -e $LIBDIR/libpscom.so ]] || die "no libpscom.so in $LIBDIR"
RMA_PP=$TMP/rma_pp
${CC:-cc} -O2 -std=gnu11 -Wall -I"$REPO/include" -o "$RMA_PP" "$SCRIPT_DIR/rma_pp.c" \
    -L"$LIBDIR" -lpscom -Wl,-rpath,"$LIBDIR" || die "building rma_pp failed"

# --- transports and pinning -------------------------------------------------------
env_of() { # env_of <transport>: PSP_* that leave only this transport
    case $1 in
    tcp) echo "PSP_SHM=0 PSP_UCP=0 PSP_OPENIB=0" ;;
    shm) echo "PSP_TCP=0 PSP_UCP=0 PSP_OPENIB=0" ;;
    *) die "unknown transport '$1'" ;;
    esac
}
NCPU=$(nproc 2>/dev/null || echo 1)
PIN_SERVER=() PIN_CLIENT=() RMA_PIN=()
if [[ $PIN == split ]] && command -v taskset >/dev/null && ((NCPU >= 2)); then
    PIN_SERVER=(taskset -c 1)
    PIN_CLIENT=(taskset -c 0)
    RMA_PIN=(-p)
    PIN_DESC="target/server on cpu 1, origin/client on cpu 0"
else
    PIN_DESC="no pinning"
fi

iters_for() {
    local size=$1 it
    if ((size <= 1024)); then echo "$ITERS"; return; fi
    it=$((ITERS * 1024 / size))
    ((it < 50)) && it=50
    echo "$it"
}

RESULTS=$TMP/results # lines: tool transport rep what size value
: >"$RESULTS"
declare -A AVAILABLE=()

run_rma() { # run_rma <transport> <rep>
    local tr=$1 rep=$2 out=$TMP/rma.$1.$2 type s
    # shellcheck disable=SC2046
    if ! timeout 600 env $(env_of "$tr") "$RMA_PP" "${RMA_PIN[@]}" -n "$ITERS" -b "$BYTES" \
        $(for s in $RMA_SIZES; do echo "-s $s"; done) >"$out" 2>&1; then
        AVAILABLE[$tr]=0
        echo "rma.sh: rma_pp over $tr failed (transport not available?):" >&2
        tail -n 5 "$out" >&2
        return 0
    fi
    type=$(awk '$1 == "contype" { print $2; exit }' "$out")
    if [[ $type != "$tr" ]]; then
        AVAILABLE[$tr]=0
        echo "rma.sh: rma_pp over $tr got a '$type' connection: $tr not available" >&2
        return 0
    fi
    awk -v t="$tr" -v r="$rep" '$1 ~ /^(put|get)_(lat|bw)$/ { print "rma", t, r, $1, $2, $4 }' \
        "$out" >>"$RESULTS"
}

run_pp() { # run_pp <transport> <eager|rndv> <rep>
    local tr=$1 mode=$2 rep=$3 out=$TMP/pp-server.$1.$2.$3 ep="" i size n cout row
    local envs
    envs=$(env_of "$tr")
    [[ $mode == rndv ]] && envs+=" PSP_RENDEZVOUS=$RNDV"
    : >"$out" # exists before the background server opens it
    # shellcheck disable=SC2086
    : >"$out" # exists before the server writes: the loop below reads it at once
    env $envs "${PIN_SERVER[@]}" "$PP" -l 0 >"$out" 2>&1 &
    SERVER_PID=$!
    for ((i = 0; i < 100; i++)); do
        ep=$(awk '$2 == "-c" { print $3; exit }' "$out" || true)
        [[ -n $ep ]] && break
        kill -0 "$SERVER_PID" 2>/dev/null || { cat "$out" >&2; die "pscom_pp server exited"; }
        sleep 0.1
    done
    [[ -n $ep ]] || { cat "$out" >&2; die "pscom_pp server printed no endpoint"; }
    for size in $PP_SIZES; do
        n=$(iters_for "$size")
        cout=$TMP/pp-client.$tr.$mode.$rep.$size
        # shellcheck disable=SC2086
        if ! timeout 300 env $envs "${PIN_CLIENT[@]}" "$PP" -c "$ep" \
            --minsize "$size" --maxsize "$size" -n "$n" -t 100000000 >"$cout" 2>&1; then
            cat "$cout" >&2
            die "pscom_pp client failed ($tr $mode, size $size, rep $rep)"
        fi
        row=$(awk -v s="$size" '$1 == s && NF >= 4 && $2 ~ /^[0-9]+$/ { print $4; exit }' "$cout")
        [[ -n $row ]] || { cat "$cout" >&2; die "no result row for size $size in pscom_pp output"; }
        echo "pp $tr $rep $mode $size $row" >>"$RESULTS"
    done
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
    if ! awk -v t="$tr" '/^New connection/ { n++; if ($NF != t) bad++ }
              END { exit !(n > 0 && bad == 0) }' "$out"; then
        cat "$out" >&2
        die "pscom_pp connections did not all use $tr (see server output above)"
    fi
}

echo "# rma.sh: R=$R, ITERS=$ITERS, BYTES=$BYTES, $PIN_DESC" >&2
echo "# build: $BUILD_DIR ($BUILD_TYPE)" >&2
for tr in $TRANSPORTS; do AVAILABLE[$tr]=1; done
# repetition 0 warms up and finds out which transports work; not counted
ALL=$RESULTS
RESULTS=$TMP/results.warmup
for ((rep = 0; rep <= R; rep++)); do
    ((rep == 1)) && RESULTS=$ALL
    trs=$TRANSPORTS
    ((rep % 2 == 0)) && trs=$(echo "$TRANSPORTS" | awk '{ for (i = NF; i > 0; i--) printf "%s ", $i }')
    for tr in $trs; do
        [[ ${AVAILABLE[$tr]} == 1 ]] || continue
        run_rma "$tr" "$rep"
        [[ ${AVAILABLE[$tr]} == 1 ]] || continue
        if ((rep % 2)); then run_pp "$tr" eager "$rep"; run_pp "$tr" rndv "$rep"
        else run_pp "$tr" rndv "$rep"; run_pp "$tr" eager "$rep"; fi
    done
    if ((rep == 0)); then echo "# warm-up done" >&2; else echo "# rep $rep/$R done" >&2; fi
done

# --- statistics -------------------------------------------------------------------
values() { # values <tool> <transport> <what> <size>: sorted ascending
    awk -v a="$1" -v t="$2" -v w="$3" -v s="$4" '$1 == a && $2 == t && $4 == w && $5 == s { print $6 }' \
        "$RESULTS" | sort -g
}
median() { awk '{ v[NR] = $1 } END { if (NR == 0) { print "nan"; exit }
    if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
best() { if [[ $1 == lat ]]; then head -n 1; else tail -n 1; fi; }
fmt() { awk -v x="$1" 'BEGIN { if (x == "nan" || x == "") print "n/a";
    else if (x >= 100) printf "%.0f", x; else if (x >= 10) printf "%.1f", x; else printf "%.2f", x }'; }
cell() { # cell <tool> <transport> <what> <size> <lat|bw>
    local v m b
    v=$(values "$1" "$2" "$3" "$4")
    m=$(printf '%s' "$v" | median)
    b=$(printf '%s' "$v" | best "$5")
    printf ' %9s %9s' "$(fmt "$m")" "$(fmt "$b")"
}
human() { awk -v s="$1" 'BEGIN { if (s >= 1048576) printf "%d MiB", s / 1048576;
    else if (s >= 1024) printf "%d KiB", s / 1024; else printf "%d B", s }'; }

echo
echo "RMA over pscom, two local processes: $R repetitions, $PIN_DESC"
echo "put lat = half round trip of an 8 B put ping-pong (target callback puts back), us"
echo "get lat = one blocking 8 B get (a round trip), us"
echo "bw = 16 operations in flight, MB/s (10^6 B/s); put bw until the target's callbacks saw every put"
echo
hdr=$(printf '%-20s' "")
sub=$(printf '%-20s' "")
for tr in $TRANSPORTS; do
    hdr+=$(printf ' %19s' "$tr")
    sub+=$(printf ' %9s %9s' median best)
done
echo "$hdr"
echo "$sub"
emit_rma_row() { # <what> <size> <lat|bw>
    local label line
    case $1 in
    put_lat) label="put 8 B lat [us]" ;;
    get_lat) label="get 8 B lat [us]" ;;
    put_bw) label="put $(human "$2") [MB/s]" ;;
    get_bw) label="get $(human "$2") [MB/s]" ;;
    esac
    line=$(printf '%-20s' "$label")
    for tr in $TRANSPORTS; do line+=$(cell rma "$tr" "$1" "$2" "$3"); done
    echo "$line"
}
emit_rma_row put_lat 8 lat
emit_rma_row get_lat 8 lat
for s in $RMA_SIZES; do emit_rma_row put_bw "$s" bw; done
for s in $RMA_SIZES; do emit_rma_row get_bw "$s" bw; done

echo
echo "pscom_pp large messages, eager vs rendezvous (PSP_RENDEZVOUS=$RNDV): MB/s = size / half round trip"
echo
hdr=$(printf '%-14s' "")
sub=$(printf '%-14s' "")
for tr in $TRANSPORTS; do
    hdr+=$(printf ' %-31s' "$tr: eager / rndv / ratio")
    sub+=$(printf ' %9s %9s %11s' eager rndv rndv/eager)
done
echo "$hdr"
echo "$sub"
NOTE=""
for s in $PP_SIZES; do
    line=$(printf '%-14s' "$(human "$s")")
    for tr in $TRANSPORTS; do
        e=$(values pp "$tr" eager "$s" | median)
        r=$(values pp "$tr" rndv "$s" | median)
        ratio=$(awk -v a="$r" -v b="$e" 'BEGIN { if (a == "nan" || b == "nan" || b == 0) print "nan"; else print a / b }')
        line+=$(printf ' %9s %9s %11s' "$(fmt "$e")" "$(fmt "$r")" "$(fmt "$ratio")")
        [[ $ratio != nan ]] && NOTE+="$tr $(human "$s"): $(fmt "$e") -> $(fmt "$r") MB/s (x$(fmt "$ratio")); "
    done
    echo "$line"
done
echo "(medians of $R; n/a = transport not available)"
echo
echo "Rendezvous on: ${NOTE:-no data}"

if [[ $VERBOSE == 1 ]]; then
    echo
    echo "per repetition (tool transport rep what size value):"
    sort -k1,1 -k2,2 -k4,4 -k5,5n -k3,3n "$RESULTS"
fi
