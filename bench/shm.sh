#!/usr/bin/env bash
# shm.sh - "same-node messaging at the speed of the hardware": pscom over its
# shm plugin against UCX over its shared-memory transports (ucx_perftest,
# UCX_TLS=posix,cma,self) and the floors of the machine (cache-line
# ping-pong shm_floor, memcpy_bw), interleaved in one sitting.
#
# Usage: bench/shm.sh [R]          (R = repetitions, default 5; or R=... in env)
#
# Environment:
#   R=5            repetitions (each runs pscom_pp, ucx_perftest, shm_floor,
#                  memcpy_bw, in rotating order)
#   BUILD_DIR=dir  use this (configured) build tree; default <repo>/build-bench,
#                  configured as Release on first use
#   PSCOM_PP=path  use this pscom_pp binary, build nothing
#   SHARED_DIR=dir location of shared/ (default <repo>/../shared)
#   UCX_PERFTEST=path  ucx_perftest binary (default: from PATH; without it the
#                  UCX columns say n/a)
#   ITERS=100000   round trips at 8 B; 64 KiB, 1 MiB and 4 MiB use ITERS/5,
#                  ITERS/50 and ITERS/200 (at least 50) - the same counts for
#                  pscom_pp and ucx_perftest
#   PIN=split      split: servers on cpu 1, clients on cpu 0; none: no pinning
#                  (shm_floor and memcpy_bw pin themselves unless PIN=none)
#   PSCOM_ENV="PSP_SHM_CMA=0 ..."  extra environment for both pscom_pp sides
#   KEEP=1         keep the temporary directory with all raw outputs
#   VERBOSE=1      also print every repetition's numbers
#
# Output: one table of medians and best-of-R values with the ratios the
# targets of issue 3 are about; see bench/README.md.
set -euo pipefail

die() { echo "shm.sh: $*" >&2; exit 1; }

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
R=${1:-${R:-5}}
ITERS=${ITERS:-100000}
PIN=${PIN:-split}
KEEP=${KEEP:-0}
VERBOSE=${VERBOSE:-0}
SIZES="8 65536 1048576 4194304"

[[ $R =~ ^[1-9][0-9]*$ ]] || die "R must be a positive integer (got '$R')"
[[ $ITERS =~ ^[1-9][0-9]*$ ]] || die "ITERS must be a positive integer (got '$ITERS')"

# --- the floor programs ----------------------------------------------------------
SHARED_DIR=${SHARED_DIR:-$REPO/../shared}
TOOLS=$SHARED_DIR/bench/tools
for t in shm_floor memcpy_bw common.h; do
    [[ -f $TOOLS/$t || -f $TOOLS/$t.c ]] ||
        die "cannot find $TOOLS/$t(.c) (shared/ is expected next to the repository, at $SHARED_DIR; set SHARED_DIR)"
done

TMP=$(mktemp -d "${TMPDIR:-/tmp}/pscom-shm-bench.XXXXXX")
SERVER_PID=
cleanup() {
    if [[ -n $SERVER_PID ]]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    if [[ $KEEP == 1 ]]; then
        echo "shm.sh: raw outputs kept in $TMP" >&2
    else
        rm -rf "$TMP"
    fi
}
trap cleanup EXIT

for t in shm_floor memcpy_bw; do
    ${CC:-cc} -O2 -std=gnu11 -o "$TMP/$t" "$TOOLS/$t.c" || die "building $t failed"
done

# --- pscom_pp ------------------------------------------------------------------------
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
        echo "shm.sh: warning: $BUILD_DIR is a '$BUILD_TYPE' build, not Release" >&2
    PP=$BUILD_DIR/bin/pscom_pp
    [[ -x $PP ]] || die "no pscom_pp at $PP"
fi

UCXPT=${UCX_PERFTEST:-$(command -v ucx_perftest || true)}
[[ -n $UCXPT ]] || echo "shm.sh: ucx_perftest not found (Debian package ucx-utils): UCX columns n/a" >&2
command -v python3 >/dev/null || [[ -z $UCXPT ]] || die "python3 is needed to find a free port for ucx_perftest"

# --- pinning ---------------------------------------------------------------------------
NCPU=$(nproc 2>/dev/null || echo 1)
PIN_SERVER=()
PIN_CLIENT=()
PIN_TOOL=()
case $PIN in
split)
    if command -v taskset >/dev/null && ((NCPU >= 2)); then
        PIN_SERVER=(taskset -c 1)
        PIN_CLIENT=(taskset -c 0)
        PIN_DESC="servers on cpu 1, clients on cpu 0"
    else
        PIN_TOOL=(env PP_NOPIN=1)
        PIN_DESC="no pinning (needs taskset and 2 cpus)"
    fi
    ;;
none)
    PIN_TOOL=(env PP_NOPIN=1)
    PIN_DESC="no pinning"
    ;;
*) die "PIN must be split or none (got '$PIN')" ;;
esac

iters_for() {
    local it
    case $1 in
    8) it=$ITERS ;;
    65536) it=$((ITERS / 5)) ;;
    1048576) it=$((ITERS / 50)) ;;
    *) it=$((ITERS / 200)) ;;
    esac
    ((it < 50)) && it=50
    echo "$it"
}

RESULTS=$TMP/results # lines: tool rep size half_rtt_us MBps  (MB = 10^6 B)
: >"$RESULTS"

# pscom only over shm
read -r -a EXTRA_ENV <<<"${PSCOM_ENV:-}"
PSCOM_ENVV=(env PSP_TCP=0 PSP_UCP=0 PSP_OPENIB=0 "${EXTRA_ENV[@]}")

run_pscom() {
    local rep=$1 out=$TMP/pscom-server.$1 ep="" i size n cout row
    : >"$out" # exists before the server writes: the loop below reads it at once
    "${PSCOM_ENVV[@]}" "${PIN_SERVER[@]}" "$PP" -l 0 >"$out" 2>&1 &
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
        if ! timeout 300 "${PSCOM_ENVV[@]}" "${PIN_CLIENT[@]}" "$PP" -c "$ep" \
            --minsize "$size" --maxsize "$size" -n "$n" -t 100000000 >"$cout" 2>&1; then
            cat "$cout" >&2
            die "pscom_pp client failed (size $size, rep $rep)"
        fi
        # latency = size / throughput: pscom_pp prints the time with 2 decimals only
        row=$(awk -v s="$size" '$1 == s && NF >= 4 && $2 ~ /^[0-9]+$/ {
            print ($4 > 0 ? $1 / $4 : $3), $4; exit }' "$cout")
        [[ -n $row ]] || { cat "$cout" >&2; die "no result row for size $size in pscom_pp output"; }
        echo "pscom $rep $size $row" >>"$RESULTS"
    done

    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
    if ! awk '/^New connection/ { n++; if ($NF != "shm") bad++ }
              END { exit !(n > 0 && bad == 0) }' "$out"; then
        cat "$out" >&2
        die "pscom connections did not all use shm (see server output above)"
    fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# one ucx_perftest run: <test> <size> <iters> <outfile>; retries on a port clash
ucx_one() {
    local test=$1 size=$2 n=$3 out=$4 try port
    for ((try = 0; try < 5; try++)); do
        port=$(free_port)
        UCX_TLS=posix,cma,self "${PIN_SERVER[@]}" "$UCXPT" -p "$port" >"$out.server" 2>&1 &
        SERVER_PID=$!
        # the server needs a moment to listen; the client retries the connection itself
        sleep 0.2
        if UCX_TLS=posix,cma,self timeout 300 "${PIN_CLIENT[@]}" "$UCXPT" localhost -p "$port" \
            -t "$test" -s "$size" -n "$n" >"$out" 2>&1 && grep -q '^Final:' "$out"; then
            wait "$SERVER_PID" 2>/dev/null || true
            SERVER_PID=
            return 0
        fi
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=
    done
    cat "$out" "$out.server" >&2
    die "ucx_perftest $test -s $size failed"
}

run_ucx() {
    local rep=$1 size n out
    [[ -n $UCXPT ]] || return 0
    for size in $SIZES; do
        n=$(iters_for "$size")
        out=$TMP/ucx-lat.$rep.$size
        ucx_one tag_lat "$size" "$n" "$out"
        # Final: iters p50_lat avg_lat overall_lat avg_bw overall_bw ... (latency: one way, us)
        awk -v r="$rep" -v s="$size" '$1 == "Final:" { printf "ucx %s %s %s %.1f\n", r, s, $4, s / $4; exit }' \
            "$out" >>"$RESULTS"
        if ((size > 8)); then
            out=$TMP/ucx-bw.$rep.$size
            ucx_one tag_bw "$size" "$n" "$out"
            # streaming bandwidth: MB/s from the overall bandwidth (MiB/s)
            awk -v r="$rep" -v s="$size" '$1 == "Final:" { printf "ucx-bw %s %s %.3f %.1f\n", r, s, s / ($7 * 1.048576), $7 * 1.048576; exit }' \
                "$out" >>"$RESULTS"
        fi
    done
}

run_floor() {
    local rep=$1 out=$TMP/floor.$1
    "${PIN_TOOL[@]}" "$TMP/shm_floor" 300 >"$out" 2>&1 || { cat "$out" >&2; die "shm_floor failed"; }
    awk -v r="$rep" '$1 == "floor" { for (i = 1; i < NF; i++) if ($i == "p50") printf "floor %s 8 %s 0\n", r, $(i + 1) }' \
        "$out" >>"$RESULTS"
}

run_memcpy() {
    local rep=$1 out=$TMP/memcpy.$1
    "${PIN_TOOL[@]}" "$TMP/memcpy_bw" 1 65536 1048576 4194304 >"$out" 2>&1 || { cat "$out" >&2; die "memcpy_bw failed"; }
    awk -v r="$rep" '$1 == "memcpy" { printf "memcpy %s %s %s %s\n", r, $2, $4, $5 }' "$out" >>"$RESULTS"
}

echo "# shm.sh: R=$R, ITERS=$ITERS, $PIN_DESC" >&2
echo "# pscom_pp: $PP ${PSCOM_ENV:+(with $PSCOM_ENV)}" >&2
echo "# ucx_perftest: ${UCXPT:-none}" >&2
# repetition 0 warms up; its numbers are not used
ALL_RESULTS=$RESULTS
RESULTS=$TMP/results.warmup
for ((rep = 0; rep <= R; rep++)); do
    ((rep == 1)) && RESULTS=$ALL_RESULTS
    case $((rep % 4)) in
    1) order="pscom ucx floor memcpy" ;;
    2) order="ucx floor memcpy pscom" ;;
    3) order="floor memcpy pscom ucx" ;;
    0) order="memcpy pscom ucx floor" ;;
    esac
    for t in $order; do "run_$t" "$rep"; done
    if ((rep == 0)); then echo "# warm-up done" >&2; else echo "# rep $rep/$R done" >&2; fi
done

# --- statistics ------------------------------------------------------------------------------
# value: latency (us) for 8 B, MB/s otherwise
col_of() { if (($1 == 8)); then echo 4; else echo 5; fi; }

values() { # values <tool> <size> -> sorted
    awk -v t="$1" -v s="$2" -v c="$(col_of "$2")" '$1 == t && $3 == s { print $c }' "$RESULTS" | sort -g
}

median() {
    awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "nan"; exit }
        if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

best() { if (($1 == 8)); then head -n 1; else tail -n 1; fi; }

rep_ratios() { # rep_ratios <tool a> <tool b> <size>: per-repetition a / b, sorted
    awk -v a="$1" -v b="$2" -v s="$3" -v c="$(col_of "$3")" '
        $3 == s && $1 == a { x[$2] = $c }
        $3 == s && $1 == b { y[$2] = $c }
        END { for (k in x) if ((k in y) && y[k] > 0) print x[k] / y[k] }' "$RESULTS" | sort -g
}

fmt() { awk -v x="$1" 'BEGIN { if (x == "nan" || x == "") print "n/a";
    else if (x >= 100) printf "%.0f", x; else if (x >= 10) printf "%.1f", x; else if (x >= 1) printf "%.2f", x; else printf "%.3f", x }'; }

ratio_best() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "nan" || b == "nan" || b <= 0) print "nan"; else print a / b }'; }

echo
echo "pscom shm vs UCX shm (ucx_perftest, UCX_TLS=posix,cma,self) and the floors: $R interleaved repetitions, $PIN_DESC"
echo "latency = half round trip in us; bw = size / half round trip in MB/s (10^6 B/s); median and best of $R"
echo "floor = cache-line ping-pong p50 (shm_floor) for latency, memcpy_bw (1 thread, cache-warm) for bandwidth"
echo "ratios: median of the per-repetition ratios (best: best / best)"
echo
printf '%-18s %17s %17s %17s %15s %15s %-22s\n' "" "pscom shm" "ucx tag_lat" "floor/memcpy" "pscom/ucx" "pscom/floor" "target (median)"
printf '%-18s %8s %8s %8s %8s %8s %8s %7s %7s %7s %7s\n' "" median best median best median best median best median best
for size in $SIZES; do
    case $size in
    8) label="8 B lat [us]"; ref=floor ;;
    65536) label="64 KiB bw [MB/s]"; ref=memcpy ;;
    1048576) label="1 MiB bw [MB/s]"; ref=memcpy ;;
    4194304) label="4 MiB bw [MB/s]"; ref=memcpy ;;
    esac
    declare -A med=() bst=()
    for tool in pscom ucx $ref; do
        med[$tool]=$(values "$tool" "$size" | median)
        bst[$tool]=$(values "$tool" "$size" | best "$size")
    done
    ru=$(rep_ratios pscom ucx "$size" | median)
    rf=$(rep_ratios pscom "$ref" "$size" | median)
    rub=$(ratio_best "${bst[pscom]}" "${bst[ucx]}")
    rfb=$(ratio_best "${bst[pscom]}" "${bst[$ref]}")
    case $size in
    8) target="ucx<=1, floor<=3"
       verdict=$(awk -v a="$ru" -v b="$rf" 'BEGIN { if (a == "nan" || b == "nan") print "?"; else print ((a <= 1 && b <= 3) ? "ok" : "MISS") }') ;;
    65536) target="(no target)"; verdict="" ;;
    *) target="ucx>=2, memcpy>=0.6"
       verdict=$(awk -v a="$ru" -v b="$rf" 'BEGIN { if (a == "nan" || b == "nan") print "?"; else print ((a >= 2 && b >= 0.6) ? "ok" : "MISS") }') ;;
    esac
    printf '%-18s %8s %8s %8s %8s %8s %8s %7s %7s %7s %7s %-17s %s\n' "$label" \
        "$(fmt "${med[pscom]}")" "$(fmt "${bst[pscom]}")" "$(fmt "${med[ucx]}")" "$(fmt "${bst[ucx]}")" \
        "$(fmt "${med[$ref]}")" "$(fmt "${bst[$ref]}")" "$(fmt "$ru")" "$(fmt "$rub")" \
        "$(fmt "$rf")" "$(fmt "$rfb")" "$target" "$verdict"
done
echo
echo "UCX streaming (ucx_perftest tag_bw, a window of sends) for reference, MB/s:"
for size in 65536 1048576 4194304; do
    printf '  %-8s median %8s  best %8s\n' "$size" "$(fmt "$(values ucx-bw "$size" | median)")" \
        "$(fmt "$(values ucx-bw "$size" | best "$size")")"
done

if [[ $VERBOSE == 1 ]]; then
    echo
    echo "per repetition (tool rep size half_rtt_us MB/s):"
    sort -k3,3n -k1,1 -k2,2n "$RESULTS"
fi
