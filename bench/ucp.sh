#!/usr/bin/env bash
# ucp.sh - "pscom over UCX near raw UCX": pscom_pp over the ucp plugin against
# ucx_perftest (tag_lat ping-pong, and tag_bw streaming for reference) and a
# plain UCX tag ping-pong (bench/ucp_pp.c: malloc()ed buffers, pre-posted
# receives) with the same UCX_TLS, run interleaved in one sitting on this host.
# pscom_pp runs twice: as usual (the server echoes the data it received, as
# ucp_pp does) and with the server's --sepbuf (replies from a buffer nobody
# writes, the memory traffic of ucx_perftest); the target compares the latter
# with tag_lat.
#
# Usage: bench/ucp.sh [R]          (R = repetitions, default 5; or R=... in env)
#
# Environment:
#   R=5            repetitions (each runs pscom_pp twice, ucp_pp, tag_lat and tag_bw per size)
#   TLS="shm tcp"  UCX transport sets to measure: shm = UCX_TLS=posix,cma,self,
#                  tcp = UCX_TLS=tcp UCX_NET_DEVICES=lo
#   BUILD_DIR=dir  use this (configured) build tree; default <repo>/build-bench,
#                  configured as Release on first use
#   PSCOM_PP=path  use this pscom_pp binary (with its libpscom4ucp.so), build nothing
#   ITERS=20000    round trips at 8 B; larger sizes use max(100, ITERS*1024/size);
#                  every tool first does n/10+1 untimed round trips (warm-up)
#   PIN=split      split: servers on cpu 1, clients on cpu 0; same: all on cpu 0;
#                  none: no pinning
#   KEEP=1         keep the temporary directory with all raw outputs
#   VERBOSE=1      also print every repetition's numbers
#   SIZES="8 65536 1048576 4194304"   message sizes (a subset of these four)
#   TOOLS="pscom pscom_sep ucp_pp tag_lat tag_bw"   what runs in each repetition
#                  at each size (sizes outermost), in this order rotated by one
#                  per repetition; e.g. the 8 B
#                  target alone, each pair of runs back to back:
#                  SIZES=8 TOOLS="pscom_sep tag_lat" R=40 bench/ucp.sh
#                  pscom_sep_b (not by default): pscom_pp --sepbuf of another
#                  build, PSCOM_PP_B, for an A/B of two builds in one sitting:
#                  PSCOM_PP_B=/tmp/old/build/bin/pscom_pp SIZES=8 \
#                    TOOLS="pscom_sep pscom_sep_b tag_lat" R=20 bench/ucp.sh
#   PSCOM_PP_B=path  the pscom_pp of pscom_sep_b (with its libpscom4ucp.so)
#
# Output: per transport set a table of medians and best-of-R values and the
# pscom/raw ratios against the targets; see bench/README.md.
set -euo pipefail

# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

R=${1:-${R:-5}}
ITERS=${ITERS:-20000}
TLS=${TLS:-shm tcp}
ALL_SIZES="8 65536 1048576 4194304"
ALL_TOOLS="pscom pscom_sep ucp_pp tag_lat tag_bw"
SIZES=${SIZES:-$ALL_SIZES}
TOOLS=${TOOLS:-$ALL_TOOLS}
PP_B=${PSCOM_PP_B:-}

need_posint R ITERS
need_words SIZES "$ALL_SIZES"
need_words TOOLS "$ALL_TOOLS pscom_sep_b"
if [[ " $TOOLS " == *" pscom_sep_b "* ]]; then
    [[ -x $PP_B ]] || die "pscom_sep_b needs PSCOM_PP_B, a pscom_pp binary (got '$PP_B')"
fi
[[ -n ${SIZES// /} && -n ${TOOLS// /} ]] || die "SIZES and TOOLS must not be empty"
command -v ucx_perftest >/dev/null || die "ucx_perftest not found (Debian: ucx-utils)"
UCXPT=ucx_perftest

bench_tmp pscom-ucp-bench
# shellcheck disable=SC2046 # the options of pkg-config: words
build_tool "$SCRIPT_DIR/ucp_pp.c" $(pkg-config --cflags --libs ucx)

# --- build pscom_pp and the ucp module ---------------------------------------
bench_pscom_pp pscom_pp pscom4ucp

# --- pinning (ucp_pp pins itself) ------------------------------------------
pin_setup "split same none"

iters_for() { iters_scaled "$1" 100; }

tls_env() { # the UCX environment of a transport set
    case $1 in
    shm) echo "UCX_TLS=posix,cma,self" ;;
    tcp) echo "UCX_TLS=tcp UCX_NET_DEVICES=lo" ;;
    *) die "unknown transport set '$1' (TLS may hold shm and tcp)" ;;
    esac
}

# RESULTS, lines: tls tool rep size half_rtt_us MBps

# pscom over ucp only: no shm, no tcp plugin (the handshake still uses TCP).
# run_pscom <tls> <rep> <size> <tool>: tool pscom (echo), pscom_sep (server
# --sepbuf) or pscom_sep_b (the same with PSCOM_PP_B)
run_pscom() {
    local tls=$1 rep=$2 size=$3 tool=$4 out=$TMP/pscom-server.$1.$2.$3.$4 n cout pp=$PP
    # shellcheck disable=SC2207 # tls_env: words
    local -a env_=(env PSP_SHM=0 PSP_TCP=0 PSP_OPENIB=0 PSP_DEBUG_CONTYPE=1 $(tls_env "$tls"))
    local -a sopt=()
    [[ $tool == pscom_sep* ]] && sopt=(--sepbuf)
    [[ $tool == pscom_sep_b ]] && pp=$PP_B
    start_server "$out" "${env_[@]}" "${PIN_SERVER[@]}" "$pp" -l 0 "${sopt[@]}"
    server_endpoint "$out"
    n=$(iters_for "$size")
    cout=$TMP/$tool-client.$tls.$rep.$size
    pp_client "$cout" "$size" "$n" "$tls, size $size, rep $rep" \
        "${env_[@]}" "${PIN_CLIENT[@]}" "$pp" -c "$EP" --warmup $((n / 10 + 1))
    # latency = size / throughput: pscom_pp prints the time with 2 decimals only
    echo "$tls $tool $rep $size $PP_LAT $PP_MBS" >>"$RESULTS"
    grep -q 'via ucp' "$cout" || { cat "$cout" >&2; die "the pscom_pp client did not connect via ucp"; }
    pp_server_done "$out" ucp
}

# the plain UCX ping-pong (it pins itself: parent cpu 0, child cpu 1)
run_ucp_pp() {
    local tls=$1 rep=$2 size=$3 n out
    n=$(iters_for "$size")
    out=$TMP/ucp_pp.$tls.$rep.$size
    # shellcheck disable=SC2046 # tls_env: words
    timeout 300 env $(tls_env "$tls") "${PIN_SELF[@]}" "$TMP/ucp_pp" "$size" "$n" >"$out" 2>&1 ||
        { cat "$out" >&2; die "ucp_pp failed ($tls, size $size)"; }
    awk -v t="$tls" -v r="$rep" '$1 == "ucp_pp" { print t, "ucp_pp", r, $2, $4, $5 }' "$out" >>"$RESULTS"
}

# ucx_perftest <test> at one size (tag_bw only for the large ones)
run_perftest() {
    local tls=$1 test=$2 rep=$3 size=$4 n out lat
    [[ $test == tag_bw && $size -lt 65536 ]] && return 0
    n=$(iters_for "$size")
    out=$TMP/$test.$tls.$rep.$size
    perftest "$out" "$(tls_env "$tls")" -t "$test" -s "$size" -n "$n" -w $((n / 10 + 1))
    # "Final: iters p50 avg overall ...": the average latency (half round trip
    # for tag_lat, time per message for tag_bw)
    lat=$(awk '$1 == "Final:" { print $4; exit }' "$out")
    [[ -n $lat ]] || { cat "$out" >&2; die "no Final: line from ucx_perftest $test"; }
    awk -v t="$tls" -v tool="$test" -v r="$rep" -v s="$size" -v l="$lat" \
        'BEGIN { printf "%s %s %s %s %s %.1f\n", t, tool, r, s, l, s / l }' >>"$RESULTS"
}

# Sizes outermost: the runs of one size follow each other within a second
# or two, so that a ratio compares runs in the same state of the host
# (until 2026-11-27 each tool ran all sizes in turn: the 8 B runs of pscom
# and tag_lat lay 10-20 s apart, and the host changes state within seconds).
one_rep() {
    local rep=$1 tls t order size
    # shellcheck disable=SC2086 # TOOLS: words
    order=$(rotate $((rep - 1)) $TOOLS) # rep 1: as given
    for tls in $TLS; do
        for size in $SIZES; do
            for t in $order; do
                case $t in
                pscom | pscom_sep | pscom_sep_b) run_pscom "$tls" "$rep" "$size" "$t" ;;
                ucp_pp) run_ucp_pp "$tls" "$rep" "$size" ;;
                *) run_perftest "$tls" "$t" "$rep" "$size" ;;
                esac
            done
        done
    done
}

echo "# ucp.sh: R=$R, ITERS=$ITERS, TLS=\"$TLS\", $PIN_DESC" >&2
echo "# pscom_pp: $PP${PP_B:+; pscom_sep_b: $PP_B}; $(ucx_info -v | head -n 1)" >&2
bench_reps one_rep

# --- statistics ------------------------------------------------------------
FMT_PREC=3

# Over shared memory the host moves between states in which UCX's own 8 B
# latency differs by up to 8x (bench/README.md), from one run to the next;
# the ratio depends on the state, so it is also given per state, taken from
# tag_lat of the same repetition. Meaningful when the two runs are adjacent
# (sizes outermost: the 8 B runs of a repetition follow each other; closest
# with TOOLS="pscom_sep tag_lat"): else they may have met different states.
state_table() { # state_table <tls>
    awk -v t="$1" '
        $1 == t && $4 == 8 && $2 == "pscom_sep" { p[$3] = $5 }
        $1 == t && $4 == 8 && $2 == "pscom_sep_b" { pb[$3] = $5 }
        $1 == t && $4 == 8 && $2 == "tag_lat" { r[$3] = $5 }
        function med(a, n,   i, j, x) { # sorts a[1..n]
            for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j > 0 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }
        END {
            split("0 0.12 0.18 0.30 1e9", lim, " ")
            split("< 0.12 us|0.12-0.18 us|0.18-0.30 us|>= 0.30 us", name, "|")
            printf "\n8 B by host state (tag_lat of the same repetition): reps, median tag_lat and pscom --sepbuf [us], median sep/tag_lat\n"
            ab = length(pb) > 0
            if (ab) printf "  (A/B: B = pscom_sep_b; then reps with both, median B/tag_lat and median B/A of the same repetition)\n"
            for (s = 1; s <= 4; s++) {
                n = 0; m = 0
                for (k in p) if ((k in r) && r[k] >= lim[s] && r[k] < lim[s + 1]) {
                    n++; a[n] = r[k]; b[n] = p[k]; q[n] = p[k] / r[k]
                    if (k in pb) { m++; qb[m] = pb[k] / r[k]; qa[m] = pb[k] / p[k] }
                }
                if (n) printf "  %-14s %4d %9.3f %9.3f %9.3f", name[s], n, med(a, n), med(b, n), med(q, n)
                else printf "  %-14s %4d %9s %9s %9s", name[s], 0, "-", "-", "-"
                if (ab && m) printf "   %4d %9.3f %9.3f", m, med(qb, m), med(qa, m)
                else if (ab) printf "   %4d %9s %9s", 0, "-", "-"
                printf "\n"
                delete a; delete b; delete q; delete qb; delete qa
            }
        }' "$RESULTS"
}

for tls in $TLS; do
    echo
    echo "pscom over ucp vs ucx_perftest, $(tls_env "$tls"): $R interleaved repetitions, $PIN_DESC"
    echo "latency = half round trip in us (lower is better); bandwidth = size / half round trip in MB/s (10^6 B/s)"
    echo "pscom --sepbuf: the pscom_pp server replies from a buffer of its own, like ucx_perftest"
    echo "sep/tag_lat = pscom --sepbuf / tag_lat: median of the per-repetition ratios, and best / best;"
    echo "pscom/ucp_pp: pscom_pp (echoing the received data) / ucp_pp (does the same), median"
    echo
    printf '%-18s %19s %19s %19s %19s %19s %21s %8s %6s %12s\n' "" "pscom_pp via ucp" "pscom --sepbuf" "ucp_pp (plain)" "ucx tag_lat" "ucx tag_bw" "sep/tag_lat" "target" "" "pscom/ucp_pp"
    printf '%-18s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s %10s %10s %8s %6s %12s\n' "" median best median best median best median best median best median best "" "" median
    for size in $SIZES; do
        case $size in
        8) target="<= 1.15" ;;
        65536) target="" ;;
        *) target=">= 0.95" ;;
        esac
        stat_cells "$tls " "$size" pscom pscom_sep ucp_pp tag_lat tag_bw
        line=$(printf '%-18s' "$(size_label "$size")")$CELLS
        rmed=$(rep_ratios "$tls pscom_sep" "$tls tag_lat" "$size" | median)
        rbest=$(ratio "${BST[pscom_sep]}" "${BST[tag_lat]}")
        verdict=$(awk -v x="$rmed" -v s="$size" 'BEGIN {
            if (x == "nan") print "?"; else if (s == 8) print (x <= 1.15 ? "ok" : "MISS");
            else if (s == 65536) print ""; else print (x >= 0.95 ? "ok" : "MISS") }')
        rpp=$(rep_ratios "$tls pscom" "$tls ucp_pp" "$size" | median)
        line+=$(printf ' %10s %10s %8s %6s %12s' "$(fmt "$rmed")" "$(fmt "$rbest")" "$target" "$verdict" "$(fmt "$rpp")")
        echo "$line"
    done
    [[ $tls == shm && " $SIZES " == *" 8 "* ]] && state_table "$tls"
done

print_reps "tls tool rep size half_rtt_us MB/s" -k1,1 -k4,4n -k2,2 -k3,3n
