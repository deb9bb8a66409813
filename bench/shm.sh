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

# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

R=${1:-${R:-5}}
ITERS=${ITERS:-100000}
SIZES="8 65536 1048576 4194304"

need_posint R ITERS

# --- the floor programs ----------------------------------------------------------
shared_tools shm_floor.c memcpy_bw.c common.h

bench_tmp pscom-shm-bench
for t in shm_floor memcpy_bw; do build_tool "$TOOLS/$t.c"; done

# --- pscom_pp ------------------------------------------------------------------------
bench_pscom_pp pscom_pp

UCXPT=${UCX_PERFTEST:-$(command -v ucx_perftest || true)}
[[ -n $UCXPT ]] || note "ucx_perftest not found (Debian package ucx-utils): UCX columns n/a"

# --- pinning (shm_floor and memcpy_bw pin themselves) -------------------------------
pin_setup "split none"

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

# RESULTS, lines: tool rep size half_rtt_us MBps  (MB = 10^6 B)

# pscom only over shm
read -r -a EXTRA_ENV <<<"${PSCOM_ENV:-}"
PSCOM_ENVV=(env PSP_TCP=0 PSP_UCP=0 PSP_OPENIB=0 "${EXTRA_ENV[@]}")

# latency = size / throughput: pscom_pp prints the time with 2 decimals only
run_pscom() { pp_sizes "$1" shm PP_LAT "${PSCOM_ENVV[@]}"; }

run_ucx() {
    local rep=$1 size n out
    [[ -n $UCXPT ]] || return 0
    for size in $SIZES; do
        n=$(iters_for "$size")
        out=$TMP/ucx-lat.$rep.$size
        perftest "$out" "UCX_TLS=posix,cma,self" -t tag_lat -s "$size" -n "$n"
        # Final: iters p50_lat avg_lat overall_lat avg_bw overall_bw ... (latency: one way, us)
        awk -v r="$rep" -v s="$size" '$1 == "Final:" { printf "ucx %s %s %s %.1f\n", r, s, $4, s / $4; exit }' \
            "$out" >>"$RESULTS"
        if ((size > 8)); then
            out=$TMP/ucx-bw.$rep.$size
            perftest "$out" "UCX_TLS=posix,cma,self" -t tag_bw -s "$size" -n "$n"
            # streaming bandwidth: MB/s from the overall bandwidth (MiB/s)
            awk -v r="$rep" -v s="$size" '$1 == "Final:" { printf "ucx-bw %s %s %.3f %.1f\n", r, s, s / ($7 * 1.048576), $7 * 1.048576; exit }' \
                "$out" >>"$RESULTS"
        fi
    done
}

run_floor() {
    local rep=$1 out=$TMP/floor.$1
    "${PIN_SELF[@]}" "$TMP/shm_floor" 300 >"$out" 2>&1 || { cat "$out" >&2; die "shm_floor failed"; }
    awk -v r="$rep" '$1 == "floor" { for (i = 1; i < NF; i++) if ($i == "p50") printf "floor %s 8 %s 0\n", r, $(i + 1) }' \
        "$out" >>"$RESULTS"
}

run_memcpy() {
    local rep=$1 out=$TMP/memcpy.$1
    "${PIN_SELF[@]}" "$TMP/memcpy_bw" 1 65536 1048576 4194304 >"$out" 2>&1 || { cat "$out" >&2; die "memcpy_bw failed"; }
    awk -v r="$rep" '$1 == "memcpy" { printf "memcpy %s %s %s %s\n", r, $2, $4, $5 }' "$out" >>"$RESULTS"
}

one_rep() { # the four tools, in an order rotated by one per repetition
    local t order
    order=$(rotate $(($1 - 1)) pscom ucx floor memcpy)
    for t in $order; do "run_$t" "$1"; done
}

echo "# shm.sh: R=$R, ITERS=$ITERS, $PIN_DESC" >&2
echo "# pscom_pp: $PP ${PSCOM_ENV:+(with $PSCOM_ENV)}" >&2
echo "# ucx_perftest: ${UCXPT:-none}" >&2
bench_reps one_rep

# --- statistics ------------------------------------------------------------------------------
FMT_PREC=2 FMT_PREC_SMALL=3

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
    stat_cells "" "$size" pscom ucx "$ref"
    ru=$(rep_ratios pscom ucx "$size" | median)
    rf=$(rep_ratios pscom "$ref" "$size" | median)
    rub=$(ratio "${BST[pscom]}" "${BST[ucx]}")
    rfb=$(ratio "${BST[pscom]}" "${BST[$ref]}")
    case $size in
    8) target="ucx<=1, floor<=3"
       verdict=$(awk -v a="$ru" -v b="$rf" 'BEGIN { if (a == "nan" || b == "nan") print "?"; else print ((a <= 1 && b <= 3) ? "ok" : "MISS") }') ;;
    65536) target="(no target)"; verdict="" ;;
    *) target="ucx>=2, memcpy>=0.6"
       verdict=$(awk -v a="$ru" -v b="$rf" 'BEGIN { if (a == "nan" || b == "nan") print "?"; else print ((a >= 2 && b >= 0.6) ? "ok" : "MISS") }') ;;
    esac
    printf '%-18s %8s %8s %8s %8s %8s %8s %7s %7s %7s %7s %-17s %s\n' "$label" \
        "$(fmt "${MED[pscom]}")" "$(fmt "${BST[pscom]}")" "$(fmt "${MED[ucx]}")" "$(fmt "${BST[ucx]}")" \
        "$(fmt "${MED[$ref]}")" "$(fmt "${BST[$ref]}")" "$(fmt "$ru")" "$(fmt "$rub")" \
        "$(fmt "$rf")" "$(fmt "$rfb")" "$target" "$verdict"
done
echo
echo "UCX streaming (ucx_perftest tag_bw, a window of sends) for reference, MB/s:"
for size in 65536 1048576 4194304; do
    printf '  %-8s median %8s  best %8s\n' "$size" "$(fmt "$(values ucx-bw "$size" | median)")" \
        "$(fmt "$(values ucx-bw "$size" | best "$size")")"
done

print_reps "tool rep size half_rtt_us MB/s" -k3,3n -k1,1 -k2,2n
