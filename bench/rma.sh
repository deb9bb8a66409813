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

# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

R=${1:-${R:-3}}
ITERS=${ITERS:-2000}
BYTES=${BYTES:-268435456}
TRANSPORTS=${TRANSPORTS:-tcp shm}
RMA_SIZES="65536 1048576 4194304"
PP_SIZES="1048576 4194304 16777216"
RNDV=65536

need_posint R ITERS BYTES

bench_tmp pscom-rma-bench

# --- build: libpscom + pscom_pp in BUILD_DIR, rma_pp against it ---------------
bench_build_tree "$REPO/build-bench" OFF pscom pscom_pp
tree_pscom_pp
[[ -e $LIBDIR/libpscom.so ]] || die "no libpscom.so in $LIBDIR"
build_pscom_tool "$SCRIPT_DIR/rma_pp.c" -Wall
RMA_PP=$TMP/rma_pp

# --- transports and pinning -------------------------------------------------------
env_of() { # env_of <transport>: PSP_* that leave only this transport
    case $1 in
    tcp) echo "PSP_SHM=0 PSP_UCP=0 PSP_OPENIB=0" ;;
    shm) echo "PSP_TCP=0 PSP_UCP=0 PSP_OPENIB=0" ;;
    *) die "unknown transport '$1'" ;;
    esac
}
pin_setup "split none"
RMA_PIN=()
if [[ $PINNED == split ]]; then
    RMA_PIN=(-p)
    PIN_DESC="target/server on cpu 1, origin/client on cpu 0"
else
    PIN_DESC="no pinning"
fi

iters_for() { iters_scaled "$1" 50; }

# RESULTS, lines: tool transport rep what size value
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
    local tr=$1 mode=$2 rep=$3 out=$TMP/pp-server.$1.$2.$3 size
    local -a envs
    read -r -a envs <<<"$(env_of "$tr")"
    [[ $mode == rndv ]] && envs+=("PSP_RENDEZVOUS=$RNDV")
    start_server "$out" env "${envs[@]}" "${PIN_SERVER[@]}" "$PP" -l 0
    server_endpoint "$out"
    for size in $PP_SIZES; do
        pp_client "$TMP/pp-client.$tr.$mode.$rep.$size" "$size" "$(iters_for "$size")" \
            "$tr $mode, size $size, rep $rep" env "${envs[@]}" "${PIN_CLIENT[@]}" "$PP" -c "$EP"
        echo "pp $tr $rep $mode $size $PP_MBS" >>"$RESULTS"
    done
    pp_server_done "$out" "$tr" pscom_pp
}

one_rep() {
    local rep=$1 trs tr
    trs=$TRANSPORTS
    ((rep % 2 == 0)) && trs=$(echo "$TRANSPORTS" | awk '{ for (i = NF; i > 0; i--) printf "%s ", $i }')
    for tr in $trs; do
        [[ ${AVAILABLE[$tr]} == 1 ]] || continue
        run_rma "$tr" "$rep"
        [[ ${AVAILABLE[$tr]} == 1 ]] || continue
        if ((rep % 2)); then run_pp "$tr" eager "$rep"; run_pp "$tr" rndv "$rep"
        else run_pp "$tr" rndv "$rep"; run_pp "$tr" eager "$rep"; fi
    done
}

echo "# rma.sh: R=$R, ITERS=$ITERS, BYTES=$BYTES, $PIN_DESC" >&2
echo "# build: $BUILD_DIR ($BUILD_TYPE)" >&2
for tr in $TRANSPORTS; do AVAILABLE[$tr]=1; done
# repetition 0 warms up and finds out which transports work; not counted
bench_reps one_rep

# --- statistics -------------------------------------------------------------------
values_of() { # values_of <tool> <transport> <what> <size>: sorted ascending
    awk -v a="$1" -v t="$2" -v w="$3" -v s="$4" '$1 == a && $2 == t && $4 == w && $5 == s { print $6 }' \
        "$RESULTS" | sort -g
}
cell() { # cell <tool> <transport> <what> <size> <lat|bw>
    local v m b
    v=$(values_of "$1" "$2" "$3" "$4")
    m=$(printf '%s' "$v" | median)
    b=$(printf '%s' "$v" | best "$5")
    printf ' %9s %9s' "$(fmt "$m")" "$(fmt "$b")"
}
# table_head <label width> <transport format> <after the transport> <format> <words...>:
# the two header lines, a group of columns per transport
table_head() {
    local hdr sub tr
    hdr=$(printf "%-$1s" "")
    sub=$hdr
    for tr in $TRANSPORTS; do
        # shellcheck disable=SC2059 # the formats are arguments
        hdr+=$(printf "$2" "$tr$3")
        # shellcheck disable=SC2059
        sub+=$(printf "$4" "${@:5}")
    done
    echo "$hdr"
    echo "$sub"
}
human() { awk -v s="$1" 'BEGIN { if (s >= 1048576) printf "%d MiB", s / 1048576;
    else if (s >= 1024) printf "%d KiB", s / 1024; else printf "%d B", s }'; }

echo
echo "RMA over pscom, two local processes: $R repetitions, $PIN_DESC"
echo "put lat = half round trip of an 8 B put ping-pong (target callback puts back), us"
echo "get lat = one blocking 8 B get (a round trip), us"
echo "bw = 16 operations in flight, MB/s (10^6 B/s); put bw until the target's callbacks saw every put"
echo
table_head 20 ' %19s' "" ' %9s %9s' median best
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
table_head 14 ' %-31s' ": eager / rndv / ratio" ' %9s %9s %11s' eager rndv rndv/eager
NOTE=""
for s in $PP_SIZES; do
    line=$(printf '%-14s' "$(human "$s")")
    for tr in $TRANSPORTS; do
        e=$(values_of pp "$tr" eager "$s" | median)
        r=$(values_of pp "$tr" rndv "$s" | median)
        ratio=$(ratio "$r" "$e")
        line+=$(printf ' %9s %9s %11s' "$(fmt "$e")" "$(fmt "$r")" "$(fmt "$ratio")")
        [[ $ratio != nan ]] && NOTE+="$tr $(human "$s"): $(fmt "$e") -> $(fmt "$r") MB/s (x$(fmt "$ratio")); "
    done
    echo "$line"
done
echo "(medians of $R; n/a = transport not available)"
echo
echo "Rendezvous on: ${NOTE:-no data}"

print_reps "tool transport rep what size value" -k1,1 -k2,2 -k4,4 -k5,5n -k3,3n
