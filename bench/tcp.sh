#!/usr/bin/env bash
# tcp.sh - "TCP speed near the raw socket": pscom over its tcp plugin against a
# raw TCP ping-pong (tcp_pp from shared/bench/tools, busy-polling "spin" and
# blocking "block" modes), run interleaved in one sitting on loopback.
#
# Usage: bench/tcp.sh [R]          (R = repetitions, default 5; or R=... in env)
#
# Environment:
#   R=5            repetitions (each runs pscom_pp, tcp_pp spin, tcp_pp block)
#   BUILD_DIR=dir  use this (configured) build tree; default <repo>/build-bench,
#                  configured as Release on first use
#   PSCOM_PP=path  use this pscom_pp binary, build nothing (e.g. an installed
#                  one, or another pscom's pscom_pp for comparison)
#   SHARED_DIR=dir location of shared/ (default <repo>/../shared)
#   ITERS=5000     round trips for the 8 B size; larger sizes use
#                  max(50, ITERS*1024/size) like tcp_pp
#   PIN=split      split: server/child on cpu 1, client/parent on cpu 0 (like
#                  tcp_pp's default); same: everything on cpu 0; none: no pinning
#   KEEP=1         keep the temporary directory with all raw outputs
#   VERBOSE=1      also print every repetition's numbers
#
# Output: a table of medians and best-of-R values; see bench/README.md.
set -euo pipefail

die() { echo "tcp.sh: $*" >&2; exit 1; }

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
R=${1:-${R:-5}}
ITERS=${ITERS:-5000}
PIN=${PIN:-split}
KEEP=${KEEP:-0}
VERBOSE=${VERBOSE:-0}
SIZES="8 65536 1048576 4194304"

[[ $R =~ ^[1-9][0-9]*$ ]] || die "R must be a positive integer (got '$R')"
[[ $ITERS =~ ^[1-9][0-9]*$ ]] || die "ITERS must be a positive integer (got '$ITERS')"

# --- locate shared/ and build the raw TCP ping-pong ----------------------
SHARED_DIR=${SHARED_DIR:-$REPO/../shared}
TOOLS=$SHARED_DIR/bench/tools
[[ -f $TOOLS/tcp_pp.c && -f $TOOLS/common.h ]] ||
    die "cannot find $TOOLS/tcp_pp.c (shared/ is expected next to the repository, at $SHARED_DIR; set SHARED_DIR)"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/pscom-tcp-bench.XXXXXX")
SERVER_PID=
cleanup() {
    if [[ -n $SERVER_PID ]]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    if [[ $KEEP == 1 ]]; then
        echo "tcp.sh: raw outputs kept in $TMP" >&2
    else
        rm -rf "$TMP"
    fi
}
trap cleanup EXIT

${CC:-cc} -O2 -std=gnu11 -o "$TMP/tcp_pp" "$TOOLS/tcp_pp.c" || die "building tcp_pp failed"

# --- build pscom_pp --------------------------------------------------------
if [[ -n ${PSCOM_PP:-} ]]; then
    PP=$PSCOM_PP
    [[ -x $PP ]] || die "PSCOM_PP=$PP is not executable"
else
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
    cmake --build "$BUILD_DIR" --target pscom_pp -j "$(nproc 2>/dev/null || echo 2)" \
        >"$TMP/cmake-build.log" 2>&1 ||
        { tail -n 40 "$TMP/cmake-build.log" >&2; die "building pscom_pp in $BUILD_DIR failed"; }
    BUILD_TYPE=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")
    [[ $BUILD_TYPE == Release ]] ||
        echo "tcp.sh: warning: $BUILD_DIR is a '$BUILD_TYPE' build, not Release" >&2
    PP=$BUILD_DIR/bin/pscom_pp
    [[ -x $PP ]] || die "no pscom_pp at $PP"
fi

# --- pinning ---------------------------------------------------------------
NCPU=$(nproc 2>/dev/null || echo 1)
PIN_SERVER=()
PIN_CLIENT=()
PIN_RAW=()
case $PIN in
split)
    if command -v taskset >/dev/null && ((NCPU >= 2)); then
        PIN_SERVER=(taskset -c 1)
        PIN_CLIENT=(taskset -c 0)
        PIN_DESC="pscom server and tcp_pp child on cpu 1, clients on cpu 0"
    else
        PIN_RAW=(env PP_NOPIN=1)
        PIN_DESC="no pinning (needs taskset and 2 cpus)"
    fi
    ;;
same)
    command -v taskset >/dev/null || die "PIN=same needs taskset"
    PIN_SERVER=(taskset -c 0)
    PIN_CLIENT=(taskset -c 0)
    PIN_RAW=(env PP_NOPIN=1 taskset -c 0)
    PIN_DESC="everything on cpu 0"
    ;;
none)
    PIN_RAW=(env PP_NOPIN=1)
    PIN_DESC="no pinning"
    ;;
*) die "PIN must be split, same or none (got '$PIN')" ;;
esac

iters_for() { # like tcp_pp's iters_for()
    local size=$1 it
    if ((size <= 1024)); then echo "$ITERS"; return; fi
    it=$((ITERS * 1024 / size))
    ((it < 50)) && it=50
    echo "$it"
}

RESULTS=$TMP/results # lines: tool rep size half_rtt_us MBps
: >"$RESULTS"

# pscom only over tcp: no shm, no ucp, no openib
PSCOM_ENV=(env PSP_SHM=0 PSP_UCP=0 PSP_OPENIB=0)

run_pscom() {
    local rep=$1 out=$TMP/pscom-server.$1 ep="" i size n cout row
    : >"$out" # exists before the server writes: the loop below reads it at once
    "${PSCOM_ENV[@]}" "${PIN_SERVER[@]}" "$PP" -l 0 >"$out" 2>&1 &
    SERVER_PID=$!
    for ((i = 0; i < 100; i++)); do
        ep=$(awk '$2 == "-c" { print $3; exit }' "$out")
        [[ -n $ep ]] && break
        kill -0 "$SERVER_PID" 2>/dev/null || { cat "$out" >&2; die "pscom_pp server exited"; }
        sleep 0.1
    done
    [[ -n $ep ]] || { cat "$out" >&2; die "pscom_pp server printed no endpoint"; }

    for size in $SIZES; do
        n=$(iters_for "$size")
        cout=$TMP/pscom-client.$rep.$size
        if ! timeout 300 "${PSCOM_ENV[@]}" "${PIN_CLIENT[@]}" "$PP" -c "$ep" \
            --minsize "$size" --maxsize "$size" -n "$n" -t 100000000 >"$cout" 2>&1; then
            cat "$cout" >&2
            die "pscom_pp client failed (size $size, rep $rep)"
        fi
        row=$(awk -v s="$size" '$1 == s && NF >= 4 && $2 ~ /^[0-9]+$/ { print $3, $4; exit }' "$cout")
        [[ -n $row ]] || { cat "$cout" >&2; die "no result row for size $size in pscom_pp output"; }
        echo "pscom $rep $size $row" >>"$RESULTS"
    done

    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
    if ! awk '/^New connection/ { n++; if ($NF != "tcp") bad++ }
              END { exit !(n > 0 && bad == 0) }' "$out"; then
        cat "$out" >&2
        die "pscom connections did not all use tcp (see server output above)"
    fi
}

run_raw() {
    local mode=$1 rep=$2 out=$TMP/tcp_pp-$1.$2 try port
    for ((try = 0; try < 8; try++)); do
        port=$((20000 + RANDOM % 40000))
        if timeout 600 "${PIN_RAW[@]}" "$TMP/tcp_pp" "$ITERS" 1 "$port" "$mode" >"$out" 2>&1; then
            awk -v m="tcp-$mode" -v r="$rep" -v sizes="$SIZES" '
                BEGIN { n = split(sizes, s, " "); for (i = 1; i <= n; i++) want[s[i]] = 1 }
                $1 == m && ($2 in want) { print m, r, $2, $4, $5 }' "$out" |
                sed "s/^tcp-$mode /raw-$mode /" >>"$RESULTS"
            return 0
        fi
        grep -q 'bind/listen' "$out" || { cat "$out" >&2; die "tcp_pp $mode failed"; }
    done
    cat "$out" >&2
    die "tcp_pp $mode: no free port found"
}

echo "# tcp.sh: R=$R, ITERS=$ITERS, $PIN_DESC" >&2
echo "# pscom_pp: $PP" >&2
# repetition 0 warms up (caches, cpu frequency, the build that just ran);
# its numbers are not used
ALL_RESULTS=$RESULTS
RESULTS=$TMP/results.warmup
for ((rep = 0; rep <= R; rep++)); do
    ((rep == 1)) && RESULTS=$ALL_RESULTS
    # rotate the order so that no tool always runs first
    case $((rep % 3)) in
    1) order="pscom spin block" ;;
    2) order="spin block pscom" ;;
    0) order="block pscom spin" ;;
    esac
    for t in $order; do
        case $t in
        pscom) run_pscom "$rep" ;;
        *) run_raw "$t" "$rep" ;;
        esac
    done
    if ((rep == 0)); then echo "# warm-up done" >&2; else echo "# rep $rep/$R done" >&2; fi
done

# --- statistics ------------------------------------------------------------
# value <tool> <size> <rep>: latency (µs) for 8 B, MB/s otherwise
value_col() { if (($1 == 8)); then echo 4; else echo 5; fi; }

values() { # values <tool> <size>  -> one value per line, sorted ascending
    local col
    col=$(value_col "$2")
    awk -v t="$1" -v s="$2" -v c="$col" '$1 == t && $3 == s { print $c }' "$RESULTS" | sort -g
}

median() { # stdin: sorted numbers
    awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "nan"; exit }
        if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

best() { # best <size>: stdin sorted ascending; min for latency, max for bandwidth
    if (($1 == 8)); then head -n 1; else tail -n 1; fi
}

rep_ratios() { # per-repetition ratio pscom / raw-spin, sorted
    local col
    col=$(value_col "$1")
    awk -v s="$1" -v c="$col" '
        $3 == s && $1 == "pscom" { p[$2] = $c }
        $3 == s && $1 == "raw-spin" { r[$2] = $c }
        END { for (k in p) if ((k in r) && r[k] > 0) print p[k] / r[k] }' "$RESULTS" | sort -g
}

fmt() { awk -v x="$1" 'BEGIN { if (x == "nan" || x == "") print "n/a";
    else if (x >= 100) printf "%.0f", x; else if (x >= 10) printf "%.1f", x; else printf "%.2f", x }'; }

echo
echo "pscom tcp vs raw TCP loopback: $R interleaved repetitions, $PIN_DESC"
echo "latency = half round trip in us (lower is better); bandwidth = size / half round trip in MB/s (10^6 B/s)"
echo "ratio = pscom / raw spin: median of the per-repetition ratios, and best pscom / best raw spin"
echo
printf '%-22s %19s %19s %19s %21s %8s %6s\n' "" "pscom tcp" "raw spin" "raw block" "pscom/raw-spin" "target" ""
printf '%-22s %9s %9s %9s %9s %9s %9s %10s %10s %8s %6s\n' "" median best median best median best median best "" ""
for size in $SIZES; do
    case $size in
    8) label="8 B latency [us]"; target="<= 1.5" ;;
    65536) label="64 KiB bw [MB/s]"; target=">= 0.8" ;;
    1048576) label="1 MiB bw [MB/s]"; target=">= 0.8" ;;
    4194304) label="4 MiB bw [MB/s]"; target=">= 0.8" ;;
    esac
    line=$(printf '%-22s' "$label")
    declare -A med=() bst=()
    for tool in pscom raw-spin raw-block; do
        med[$tool]=$(values "$tool" "$size" | median)
        bst[$tool]=$(values "$tool" "$size" | best "$size")
        line+=$(printf ' %9s %9s' "$(fmt "${med[$tool]}")" "$(fmt "${bst[$tool]}")")
    done
    rmed=$(rep_ratios "$size" | median)
    rbest=$(awk -v a="${bst[pscom]}" -v b="${bst[raw-spin]}" 'BEGIN { if (b > 0) print a / b; else print "nan" }')
    verdict=$(awk -v x="$rmed" -v s="$size" 'BEGIN {
        if (x == "nan") print "?"; else if (s == 8) print (x <= 1.5 ? "ok" : "MISS"); else print (x >= 0.8 ? "ok" : "MISS") }')
    line+=$(printf ' %10s %10s %8s %6s' "$(fmt "$rmed")" "$(fmt "$rbest")" "$target" "$verdict")
    echo "$line"
done

if [[ $VERBOSE == 1 ]]; then
    echo
    echo "per repetition (tool rep size half_rtt_us MB/s):"
    sort -k3,3n -k1,1 -k2,2n "$RESULTS"
fi
