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

# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

R=${1:-${R:-5}}
ITERS=${ITERS:-5000}
SIZES="8 65536 1048576 4194304"

need_posint R ITERS

# --- locate shared/ and build the raw TCP ping-pong ----------------------
shared_tools tcp_pp.c common.h

bench_tmp pscom-tcp-bench
build_tool "$TOOLS/tcp_pp.c"

# --- build pscom_pp --------------------------------------------------------
bench_pscom_pp pscom_pp

# --- pinning (tcp_pp pins itself) ------------------------------------------
pin_setup "split same none"
[[ $PINNED == split ]] && PIN_DESC="pscom server and tcp_pp child on cpu 1, clients on cpu 0"

iters_for() { iters_scaled "$1" 50; } # like tcp_pp's iters_for()

# RESULTS, lines: tool rep size half_rtt_us MBps

# pscom only over tcp: no shm, no ucp, no openib
PSCOM_ENV=(env PSP_SHM=0 PSP_UCP=0 PSP_OPENIB=0)

run_pscom() { pp_sizes "$1" tcp PP_US "${PSCOM_ENV[@]}"; }

run_raw() {
    local mode=$1 rep=$2 out=$TMP/tcp_pp-$1.$2 try port
    for ((try = 0; try < 8; try++)); do
        port=$((20000 + RANDOM % 40000))
        if timeout 600 "${PIN_SELF[@]}" "$TMP/tcp_pp" "$ITERS" 1 "$port" "$mode" >"$out" 2>&1; then
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

one_rep() { # rotate the order so that no tool always runs first
    local t order
    order=$(rotate $(($1 - 1)) pscom spin block)
    for t in $order; do
        case $t in
        pscom) run_pscom "$1" ;;
        *) run_raw "$t" "$1" ;;
        esac
    done
}

echo "# tcp.sh: R=$R, ITERS=$ITERS, $PIN_DESC" >&2
echo "# pscom_pp: $PP" >&2
# repetition 0 warms up (caches, cpu frequency, the build that just ran);
# its numbers are not used
bench_reps one_rep

# --- statistics ------------------------------------------------------------
echo
echo "pscom tcp vs raw TCP loopback: $R interleaved repetitions, $PIN_DESC"
echo "latency = half round trip in us (lower is better); bandwidth = size / half round trip in MB/s (10^6 B/s)"
echo "ratio = pscom / raw spin: median of the per-repetition ratios, and best pscom / best raw spin"
echo
printf '%-22s %19s %19s %19s %21s %8s %6s\n' "" "pscom tcp" "raw spin" "raw block" "pscom/raw-spin" "target" ""
printf '%-22s %9s %9s %9s %9s %9s %9s %10s %10s %8s %6s\n' "" median best median best median best median best "" ""
for size in $SIZES; do
    if ((size == 8)); then target="<= 1.5"; else target=">= 0.8"; fi
    stat_cells "" "$size" pscom raw-spin raw-block
    line=$(printf '%-22s' "$(size_label "$size")")$CELLS
    rmed=$(rep_ratios pscom raw-spin "$size" | median)
    rbest=$(ratio "${BST[pscom]}" "${BST[raw-spin]}")
    verdict=$(awk -v x="$rmed" -v s="$size" 'BEGIN {
        if (x == "nan") print "?"; else if (s == 8) print (x <= 1.5 ? "ok" : "MISS"); else print (x >= 0.8 ? "ok" : "MISS") }')
    line+=$(printf ' %10s %10s %8s %6s' "$(fmt "$rmed")" "$(fmt "$rbest")" "$target" "$verdict")
    echo "$line"
done

print_reps "tool rep size half_rtt_us MB/s" -k3,3n -k1,1 -k2,2n
