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
#   TOOLS="pscom pscom_sep ucp_pp tag_lat tag_bw"   what runs in each repetition,
#                  in this order rotated by one per repetition; e.g. the 8 B
#                  target alone, each pair of runs back to back:
#                  SIZES=8 TOOLS="pscom_sep tag_lat" R=40 bench/ucp.sh
#
# Output: per transport set a table of medians and best-of-R values and the
# pscom/raw ratios against the targets; see bench/README.md.
set -euo pipefail

die() { echo "ucp.sh: $*" >&2; exit 1; }

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)
R=${1:-${R:-5}}
ITERS=${ITERS:-20000}
PIN=${PIN:-split}
KEEP=${KEEP:-0}
VERBOSE=${VERBOSE:-0}
TLS=${TLS:-shm tcp}
ALL_SIZES="8 65536 1048576 4194304"
ALL_TOOLS="pscom pscom_sep ucp_pp tag_lat tag_bw"
SIZES=${SIZES:-$ALL_SIZES}
TOOLS=${TOOLS:-$ALL_TOOLS}

[[ $R =~ ^[1-9][0-9]*$ ]] || die "R must be a positive integer (got '$R')"
[[ $ITERS =~ ^[1-9][0-9]*$ ]] || die "ITERS must be a positive integer (got '$ITERS')"
for x in $SIZES; do [[ " $ALL_SIZES " == *" $x "* ]] || die "SIZES: $x is not one of $ALL_SIZES"; done
for x in $TOOLS; do [[ " $ALL_TOOLS " == *" $x "* ]] || die "TOOLS: $x is not one of $ALL_TOOLS"; done
[[ -n ${SIZES// /} && -n ${TOOLS// /} ]] || die "SIZES and TOOLS must not be empty"
command -v ucx_perftest >/dev/null || die "ucx_perftest not found (Debian: ucx-utils)"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/pscom-ucp-bench.XXXXXX")
SERVER_PID=
cleanup() {
    if [[ -n $SERVER_PID ]]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    if [[ $KEEP == 1 ]]; then
        echo "ucp.sh: raw outputs kept in $TMP" >&2
    else
        rm -rf "$TMP"
    fi
}
trap cleanup EXIT

${CC:-cc} -O2 -std=gnu11 -o "$TMP/ucp_pp" "$SCRIPT_DIR/ucp_pp.c" $(pkg-config --cflags --libs ucx) ||
    die "building ucp_pp failed"

# --- build pscom_pp and the ucp module ---------------------------------------
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
    cmake --build "$BUILD_DIR" --target pscom_pp pscom4ucp -j "$(nproc 2>/dev/null || echo 2)" \
        >"$TMP/cmake-build.log" 2>&1 ||
        { tail -n 40 "$TMP/cmake-build.log" >&2; die "building pscom_pp and pscom4ucp in $BUILD_DIR failed (is UCX found?)"; }
    BUILD_TYPE=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")
    [[ $BUILD_TYPE == Release ]] ||
        echo "ucp.sh: warning: $BUILD_DIR is a '$BUILD_TYPE' build, not Release" >&2
    PP=$BUILD_DIR/bin/pscom_pp
    [[ -x $PP ]] || die "no pscom_pp at $PP"
fi

# --- pinning ---------------------------------------------------------------
NCPU=$(nproc 2>/dev/null || echo 1)
PIN_SERVER=()
PIN_CLIENT=()
case $PIN in
split)
    if command -v taskset >/dev/null && ((NCPU >= 2)); then
        PIN_SERVER=(taskset -c 1)
        PIN_CLIENT=(taskset -c 0)
        PIN_DESC="servers on cpu 1, clients on cpu 0"
    else
        PIN_DESC="no pinning (needs taskset and 2 cpus)"
    fi
    ;;
same)
    command -v taskset >/dev/null || die "PIN=same needs taskset"
    PIN_SERVER=(taskset -c 0)
    PIN_CLIENT=(taskset -c 0)
    PIN_DESC="everything on cpu 0"
    ;;
none) PIN_DESC="no pinning" ;;
*) die "PIN must be split, same or none (got '$PIN')" ;;
esac

iters_for() {
    local size=$1 it
    if ((size <= 1024)); then echo "$ITERS"; return; fi
    it=$((ITERS * 1024 / size))
    ((it < 100)) && it=100
    echo "$it"
}

tls_env() { # the UCX environment of a transport set
    case $1 in
    shm) echo "UCX_TLS=posix,cma,self" ;;
    tcp) echo "UCX_TLS=tcp UCX_NET_DEVICES=lo" ;;
    *) die "unknown transport set '$1' (TLS may hold shm and tcp)" ;;
    esac
}

RESULTS=$TMP/results # lines: tls tool rep size half_rtt_us MBps
: >"$RESULTS"

stop_server() {
    if [[ -n $SERVER_PID ]]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=
    fi
}

# pscom over ucp only: no shm, no tcp plugin (the handshake still uses TCP).
# run_pscom <tls> <rep> <tool>: tool pscom (echo) or pscom_sep (server --sepbuf)
run_pscom() {
    local tls=$1 rep=$2 tool=$3 out=$TMP/pscom-server.$1.$2.$3 ep="" i size n cout row
    local -a env_=(env PSP_SHM=0 PSP_TCP=0 PSP_OPENIB=0 PSP_DEBUG_CONTYPE=1 $(tls_env "$tls"))
    local -a sopt=()
    [[ $tool == pscom_sep ]] && sopt=(--sepbuf)
    : >"$out" # exists before the server writes to it
    "${env_[@]}" "${PIN_SERVER[@]}" "$PP" -l 0 "${sopt[@]}" >>"$out" 2>&1 &
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
        cout=$TMP/$tool-client.$tls.$rep.$size
        if ! timeout 300 "${env_[@]}" "${PIN_CLIENT[@]}" "$PP" -c "$ep" \
            --minsize "$size" --maxsize "$size" -n "$n" --warmup $((n / 10 + 1)) -t 100000000 \
            >"$cout" 2>&1; then
            cat "$cout" >&2
            die "pscom_pp client failed ($tls, size $size, rep $rep)"
        fi
        # latency = size / throughput: pscom_pp prints the time with 2 decimals only
        row=$(awk -v s="$size" '$1 == s && NF >= 4 && $2 ~ /^[0-9]+$/ {
            print ($4 > 0 ? $1 / $4 : $3), $4; exit }' "$cout")
        [[ -n $row ]] || { cat "$cout" >&2; die "no result row for size $size in pscom_pp output"; }
        echo "$tls $tool $rep $size $row" >>"$RESULTS"
        grep -q 'via ucp' "$cout" || { cat "$cout" >&2; die "the pscom_pp client did not connect via ucp"; }
    done
    stop_server
    if ! awk '/^New connection/ { n++; if ($NF != "ucp") bad++ }
              END { exit !(n > 0 && bad == 0) }' "$out"; then
        cat "$out" >&2
        die "pscom connections did not all use ucp (see server output above)"
    fi
}

# the plain UCX ping-pong (it pins itself: parent cpu 0, child cpu 1)
run_ucp_pp() {
    local tls=$1 rep=$2 size n out
    local -a pin=()
    [[ $PIN == split ]] || pin=(env PP_NOPIN=1)
    [[ $PIN == same ]] && pin+=(taskset -c 0)
    for size in $SIZES; do
        n=$(iters_for "$size")
        out=$TMP/ucp_pp.$tls.$rep.$size
        timeout 300 env $(tls_env "$tls") "${pin[@]}" "$TMP/ucp_pp" "$size" "$n" >"$out" 2>&1 ||
            { cat "$out" >&2; die "ucp_pp failed ($tls, size $size)"; }
        awk -v t="$tls" -v r="$rep" '$1 == "ucp_pp" { print t, "ucp_pp", r, $2, $4, $5 }' "$out" >>"$RESULTS"
    done
}

# ucx_perftest <test> for every size (tag_bw only for the large ones)
run_perftest() {
    local tls=$1 test=$2 rep=$3 size n w out try port lat ok
    for size in $SIZES; do
        [[ $test == tag_bw && $size -lt 65536 ]] && continue
        n=$(iters_for "$size")
        w=$((n / 10 + 1))
        out=$TMP/$test.$tls.$rep.$size
        ok=0
        for ((try = 0; try < 8; try++)); do
            port=$((20000 + RANDOM % 40000))
            env $(tls_env "$tls") "${PIN_SERVER[@]}" ucx_perftest -p "$port" >"$out.server" 2>&1 &
            SERVER_PID=$!
            sleep 0.3 # the server has no "ready" output; the client retries below
            if timeout 300 env $(tls_env "$tls") "${PIN_CLIENT[@]}" ucx_perftest localhost -p "$port" \
                -t "$test" -s "$size" -n "$n" -w "$w" >"$out" 2>&1; then
                ok=1
            fi
            stop_server
            ((ok)) && break
        done
        ((ok)) || { cat "$out" "$out.server" >&2; die "ucx_perftest $test failed ($tls, size $size)"; }
        # "Final: iters p50 avg overall ...": the average latency (half round trip
        # for tag_lat, time per message for tag_bw)
        lat=$(awk '$1 == "Final:" { print $4; exit }' "$out")
        [[ -n $lat ]] || { cat "$out" >&2; die "no Final: line from ucx_perftest $test"; }
        awk -v t="$tls" -v tool="$test" -v r="$rep" -v s="$size" -v l="$lat" \
            'BEGIN { printf "%s %s %s %s %s %.1f\n", t, tool, r, s, l, s / l }' >>"$RESULTS"
    done
}

rotate() { # rotate <n> <words...>: the words, rotated left by n
    local n=$1
    shift
    local -a w=("$@")
    local i k=${#w[@]}
    for ((i = 0; i < k; i++)); do printf '%s ' "${w[((i + n) % k + k) % k]}"; done
}

echo "# ucp.sh: R=$R, ITERS=$ITERS, TLS=\"$TLS\", $PIN_DESC" >&2
echo "# pscom_pp: $PP; $(ucx_info -v | head -n 1)" >&2
ALL_RESULTS=$RESULTS
RESULTS=$TMP/results.warmup
for ((rep = 0; rep <= R; rep++)); do
    ((rep == 1)) && RESULTS=$ALL_RESULTS
    for tls in $TLS; do
        order=$(rotate $((rep - 1)) $TOOLS) # rep 1: as given
        for t in $order; do
            case $t in
            pscom | pscom_sep) run_pscom "$tls" "$rep" "$t" ;;
            ucp_pp) run_ucp_pp "$tls" "$rep" ;;
            *) run_perftest "$tls" "$t" "$rep" ;;
            esac
        done
    done
    if ((rep == 0)); then echo "# warm-up done" >&2; else echo "# rep $rep/$R done" >&2; fi
done

# --- statistics ------------------------------------------------------------
value_col() { if (($1 == 8)); then echo 5; else echo 6; fi; }

values() { # values <tls> <tool> <size> -> sorted ascending
    local col
    col=$(value_col "$3")
    awk -v t="$1" -v tool="$2" -v s="$3" -v c="$col" '$1 == t && $2 == tool && $4 == s { print $c }' \
        "$RESULTS" | sort -g
}

median() {
    awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "nan"; exit }
        if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

best() { if (($1 == 8)); then head -n 1; else tail -n 1; fi; }

rep_ratios() { # rep_ratios <tls> <size> <pscom tool> <raw tool>: pscom / raw per repetition, sorted
    local col
    col=$(value_col "$2")
    awk -v t="$1" -v s="$2" -v c="$col" -v ps="$3" -v raw="$4" '
        $1 == t && $4 == s && $2 == ps { p[$3] = $c }
        $1 == t && $4 == s && $2 == raw { r[$3] = $c }
        END { for (k in p) if ((k in r) && r[k] > 0) print p[k] / r[k] }' "$RESULTS" | sort -g
}

# Over shared memory the host moves between states in which UCX's own 8 B
# latency differs by up to 8x (bench/README.md), from one run to the next;
# the ratio depends on the state, so it is also given per state, taken from
# tag_lat of the same repetition. Meaningful when the two runs are adjacent
# (TOOLS="pscom_sep tag_lat"): else they may have met different states.
state_table() { # state_table <tls>
    awk -v t="$1" '
        $1 == t && $4 == 8 && $2 == "pscom_sep" { p[$3] = $5 }
        $1 == t && $4 == 8 && $2 == "tag_lat" { r[$3] = $5 }
        function med(a, n,   i, j, x) { # sorts a[1..n]
            for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j > 0 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
            return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }
        END {
            split("0 0.12 0.18 0.30 1e9", lim, " ")
            split("< 0.12 us|0.12-0.18 us|0.18-0.30 us|>= 0.30 us", name, "|")
            printf "\n8 B by host state (tag_lat of the same repetition): reps, median tag_lat and pscom --sepbuf [us], median sep/tag_lat\n"
            for (s = 1; s <= 4; s++) {
                n = 0
                for (k in p) if ((k in r) && r[k] >= lim[s] && r[k] < lim[s + 1]) { n++; a[n] = r[k]; b[n] = p[k]; q[n] = p[k] / r[k] }
                if (n) printf "  %-14s %4d %9.3f %9.3f %9.3f\n", name[s], n, med(a, n), med(b, n), med(q, n)
                else printf "  %-14s %4d %9s %9s %9s\n", name[s], 0, "-", "-", "-"
                delete a; delete b; delete q
            }
        }' "$RESULTS"
}

fmt() { awk -v x="$1" 'BEGIN { if (x == "nan" || x == "") print "n/a";
    else if (x >= 100) printf "%.0f", x; else if (x >= 10) printf "%.1f", x; else printf "%.3f", x }'; }

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
        8) label="8 B latency [us]"; target="<= 1.15" ;;
        65536) label="64 KiB bw [MB/s]"; target="" ;;
        1048576) label="1 MiB bw [MB/s]"; target=">= 0.95" ;;
        4194304) label="4 MiB bw [MB/s]"; target=">= 0.95" ;;
        esac
        line=$(printf '%-18s' "$label")
        declare -A med=() bst=()
        for tool in pscom pscom_sep ucp_pp tag_lat tag_bw; do
            med[$tool]=$(values "$tls" "$tool" "$size" | median)
            bst[$tool]=$(values "$tls" "$tool" "$size" | best "$size")
            line+=$(printf ' %9s %9s' "$(fmt "${med[$tool]}")" "$(fmt "${bst[$tool]}")")
        done
        rmed=$(rep_ratios "$tls" "$size" pscom_sep tag_lat | median)
        rbest=$(awk -v a="${bst[pscom_sep]}" -v b="${bst[tag_lat]}" 'BEGIN { if (b > 0) print a / b; else print "nan" }')
        verdict=$(awk -v x="$rmed" -v s="$size" 'BEGIN {
            if (x == "nan") print "?"; else if (s == 8) print (x <= 1.15 ? "ok" : "MISS");
            else if (s == 65536) print ""; else print (x >= 0.95 ? "ok" : "MISS") }')
        rpp=$(rep_ratios "$tls" "$size" pscom ucp_pp | median)
        line+=$(printf ' %10s %10s %8s %6s %12s' "$(fmt "$rmed")" "$(fmt "$rbest")" "$target" "$verdict" "$(fmt "$rpp")")
        echo "$line"
    done
    [[ $tls == shm && " $SIZES " == *" 8 "* ]] && state_table "$tls"
done

if [[ $VERBOSE == 1 ]]; then
    echo
    echo "per repetition (tls tool rep size half_rtt_us MB/s):"
    sort -k1,1 -k4,4n -k2,2 -k3,3n "$RESULTS"
fi
