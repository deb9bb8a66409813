#!/usr/bin/env bash
# mixed.sh - 8 B latency over one transport while the processes also hold
# an idle connection over another (bench/mixed_pp.c): shm with an idle tcp
# connection (a job's processes within a node, each also connected across
# nodes), tcp with an idle shm connection. Every case runs alone and "+
# idle other", interleaved, R times; optionally against another build
# (LIBDIR_B) in the same sitting.
#
# Usage: bench/mixed.sh [R]        (R = repetitions, default 5; or R=... in env)
#
# Environment:
#   R=5            repetitions
#   BUILD_DIR=dir  use this (configured) build tree; default <repo>/build-bench,
#                  configured as Release on first use
#   LIBDIR_B=dir   also run against the libpscom.so in this directory
#                  (another build's lib/), column B
#   SHM_ITERS=200000 TCP_ITERS=20000   round trips per run
#   KEEP=1         keep the temporary directory with all raw outputs
#   VERBOSE=1      also print every repetition's numbers
#
# Output: medians and best-of-R half round trips [us] per case, and the
# ratio "+ idle other" / alone (medians of the per-repetition ratios).
set -euo pipefail

# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

R=${1:-${R:-5}}
SHM_ITERS=${SHM_ITERS:-200000}
TCP_ITERS=${TCP_ITERS:-20000}
LIBDIR_B=${LIBDIR_B:-}
need_posint R SHM_ITERS TCP_ITERS
[[ -z $LIBDIR_B || -e $LIBDIR_B/libpscom.so ]] || die "LIBDIR_B=$LIBDIR_B holds no libpscom.so"

bench_tmp pscom-mixed-bench
bench_build_tree "$REPO/build-bench" OFF pscom
build_pscom_tool "$SCRIPT_DIR/mixed_pp.c" -Wall

LIBS=("$LIBDIR")
[[ -n $LIBDIR_B ]] && LIBS+=("$LIBDIR_B")

# RESULTS, lines: build mode other rep half_rtt_us
run_case() { # run_case <build index> <mode> <other> <rep>
    local lib=${LIBS[$1]} mode=$2 other=$3 rep=$4 out n
    out=$TMP/mixed.$1.$2.$3.$4
    n=$SHM_ITERS
    [[ $mode == tcp ]] && n=$TCP_ITERS
    timeout 300 env PSP_UCP=0 PSP_OPENIB=0 LD_LIBRARY_PATH="$lib" "$TMP/mixed_pp" "$mode" "$other" "$n" \
        >"$out" 2>&1 || { cat "$out" >&2; die "mixed_pp $mode $other failed"; }
    awk -v b="$1" -v r="$rep" -v m="$mode" '$1 == "mixed_pp" {
        if ($5 != m) { print "connection is " $5 ", not " m > "/dev/stderr"; exit 1 }
        print b, $2, $3, r, $4 }' "$out" >>"$RESULTS" || die "mixed_pp $mode $other: wrong connection type"
}

one_rep() {
    local rep=$1 b mode other
    for mode in shm tcp; do
        for other in 0 1; do
            for b in "${!LIBS[@]}"; do run_case "$b" "$mode" "$other" "$rep"; done
        done
    done
}
bench_reps one_rep

# --- table -------------------------------------------------------------------
cell() { # cell <build> <mode> <other>: median and best
    awk -v b="$1" -v m="$2" -v o="$3" '$1 == b && $2 == m && $3 == o { print $5 }' "$RESULTS" | sort -g |
        awk '{ v[NR] = $1 } END {
            if (!NR) { printf "%9s %9s", "n/a", "n/a"; exit }
            med = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
            printf "%9.3f %9.3f", med, v[1] }'
}
slowdown() { # slowdown <build> <mode>: median of (+ idle other) / alone per repetition
    awk -v b="$1" -v m="$2" '$1 == b && $2 == m { x[$3, $4] = $5; reps[$4] = 1 }
        END { for (r in reps) if (((0, r) in x) && ((1, r) in x)) print x[1, r] / x[0, r] }' "$RESULTS" |
        sort -g | median
}

echo
echo "8 B half round trip [us] with an idle connection over the other transport; $R interleaved repetitions"
echo "A: $LIBDIR${LIBDIR_B:+; B: $LIBDIR_B}"
echo
printf '%-22s %19s %19s %12s\n' "" "alone" "+ idle other" "slowdown"
printf '%-22s %9s %9s %9s %9s %12s\n' "" median best median best median
for b in "${!LIBS[@]}"; do
    name=A
    ((b == 1)) && name=B
    for mode in shm tcp; do
        o=tcp
        [[ $mode == tcp ]] && o=shm
        printf '%-22s %s %s %12s\n' "$name: $mode (idle $o)" "$(cell "$b" "$mode" 0)" "$(cell "$b" "$mode" 1)" \
            "$(fmt "$(slowdown "$b" "$mode")")"
    done
done
print_reps "build mode other rep half_rtt_us" -k1,1n -k2,2 -k3,3n -k4,4n
