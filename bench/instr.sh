#!/usr/bin/env bash
# instr.sh - instructions per 8 B round trip on the client side, counted by
# callgrind: the same for the same build whatever else the machine does, so
# that small changes to the latency path can be compared where timings are too
# noisy (bench/README.md). The client (bench/instr_pp.c) waits for a FIFO byte
# the server writes after each reply before it waits for the reply itself: no
# idle polling passes are counted. Two runs (W and W+N round trips) are
# subtracted, so connection setup and warm-up drop out.
#
# With CRIT=1 (ucp-shm, ucp-tcp) it counts only the critical path instead:
# on an echoing pscom_pp --sepbuf server, from the completion of a pre-posted
# receive (the plugin's recv_cb) to the reply's ucp_tag_send_nbx, i.e. what
# lies between a message's arrival and its answer (the plugin built with
# -DPSCOM_UCP_CRIT_COUNT, lib/plugins/ucp/ucp_priv.h). Work after the send
# (retiring it, posting the next receive) is not counted there: it overlaps
# with the message's way to the peer.
#
# With SERVER=1 (ucp-shm, ucp-tcp) it compares the whole work of an echoing
# server per 8 B round trip, counted from start to end and the two runs
# subtracted: a pscom_pp --sepbuf server over ucp against the responder of
# ucx_perftest tag_lat, same UCX_TLS. Under callgrind the server is far
# slower than its (native) client, so the next message is nearly always
# there when it polls: the counts hold the work per message, hardly any
# idle passes. This is what matters when the two processes share one
# physical core (SMT siblings: the host's "0.08 us state" of
# bench/README.md), where every instruction of either side costs time.
#
# Usage: bench/instr.sh [TRANSPORT]   TRANSPORT: ucp-shm (default), ucp-tcp, shm, tcp,
#                                     openib-emul (openib over the software HCA of
#                                     test/verbs_emul, which is linked into the module:
#                                     read the openib_* and vemul_* functions apart)
#
# Environment:
#   CRIT=1         the critical path only (see above)
#   SERVER=1       the echoing server's whole work, pscom_pp against tag_lat (see above)
#   BUILD_DIR=dir  configured build tree (default <repo>/build-instr, configured
#                  as Release with -g on first use; with CRIT=1 build-instr-crit)
#   N=5000         round trips counted; W=500 round trips subtracted
#   XH=12          xheader bytes (pscom_pp's default)
#   TOP=40         functions listed (those of at least 1 instruction per round trip)
#   KEEP=1         keep the callgrind outputs
#
# Output: instructions per round trip by object (libpscom, the plugin, UCX's
# libraries, libc, the program; "(inlined)": lines of inline functions, which
# callgrind attributes to their header and no object) and by function.
set -euo pipefail

# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

TRANSPORT=${1:-ucp-shm}
N=${N:-5000}
W=${W:-500}
XH=${XH:-12}
TOP=${TOP:-40}
CRIT=${CRIT:-0}
SERVER=${SERVER:-0}

need_posint N W
[[ $XH =~ ^[0-9]+$ ]] && ((XH <= 100)) || die "XH must be 0..100"
command -v valgrind >/dev/null || die "valgrind not found (Debian: valgrind)"
command -v callgrind_annotate >/dev/null || die "callgrind_annotate not found (Debian: valgrind)"

case $TRANSPORT in
ucp-shm) TENV=(PSP_SHM=0 PSP_TCP=0 UCX_TLS=posix,cma,self) ;;
ucp-tcp) TENV=(PSP_SHM=0 PSP_TCP=0 UCX_TLS=tcp UCX_NET_DEVICES=lo) ;;
shm) TENV=(PSP_UCP=0) ;;
tcp) TENV=(PSP_UCP=0 PSP_SHM=0) ;;
openib-emul) TENV=(PSP_UCP=0 PSP_SHM=0 PSP_TCP=0 PSP_OPENIB=1) ;;
*) die "unknown transport '$TRANSPORT' (ucp-shm, ucp-tcp, shm, tcp, openib-emul)" ;;
esac
[[ $CRIT == 0 || $TRANSPORT == ucp-* ]] || die "CRIT=1 needs a ucp transport (ucp-shm, ucp-tcp)"
[[ $SERVER == 0 || $TRANSPORT == ucp-* ]] || die "SERVER=1 needs a ucp transport (ucp-shm, ucp-tcp)"
[[ $SERVER == 0 || $CRIT == 0 ]] || die "CRIT=1 and SERVER=1 exclude each other"
if [[ $SERVER == 1 ]]; then
    command -v ucx_perftest >/dev/null || die "ucx_perftest not found (Debian: ucx-utils)"
    command -v ss >/dev/null || die "ss not found (Debian: iproute2)"
fi

bench_tmp pscom-instr outputs

# --- build ---------------------------------------------------------------------
CFLAGS_="-g -gdwarf-4" # valgrind 3.19 cannot read the DWARF 5 of clang 14 (CC=clang)
if [[ $CRIT == 1 ]]; then
    BUILD_DIR=${BUILD_DIR:-$REPO/build-instr-crit}
    CFLAGS_="-g -gdwarf-4 -DPSCOM_UCP_CRIT_COUNT"
    [[ -f /usr/include/valgrind/callgrind.h ]] || die "valgrind/callgrind.h not found (Debian: valgrind)"
fi
TESTS=OFF
if [[ $TRANSPORT == openib-emul ]]; then # the emulation's module is a test target
    BUILD_DIR=${BUILD_DIR:-$REPO/build-instr-openib}
    TESTS=ON
fi
BUILD_DIR=${BUILD_DIR:-$REPO/build-instr}
bench_configure "$BUILD_DIR" -DCMAKE_C_FLAGS="$CFLAGS_" -DPSCOM_BUILD_TESTS=$TESTS
bench_build "$BUILD_DIR" pscom
[[ $TRANSPORT == ucp-* ]] && bench_build "$BUILD_DIR" pscom4ucp
if [[ $TRANSPORT == openib-emul ]]; then
    bench_build "$BUILD_DIR" pscom4openib_emul
    TENV+=(PSP_PLUGINDIR="$BUILD_DIR/test/openib_emul")
fi
LIBDIR=$BUILD_DIR/lib
build_pscom_tool "$SCRIPT_DIR/instr_pp.c" -g
PRELOAD=
if [[ $TRANSPORT == ucp-* ]]; then
    # The server must not arm its UCX worker between messages: the client's
    # send would then also wake it (a syscall on the client's side), in some
    # round trips and not in others.
    printf '#include <ucp/api/ucp.h>\nucs_status_t ucp_worker_arm(ucp_worker_h w) { (void)w; return UCS_ERR_BUSY; }\n' \
        >"$TMP/noarm.c"
    ${CC:-cc} -O2 -shared -fPIC -o "$TMP/noarm.so" "$TMP/noarm.c" $(pkg-config --cflags ucx) ||
        die "building the arm blocker failed"
    PRELOAD=$TMP/noarm.so
fi

# --- runs ------------------------------------------------------------------------
ENVV=(env PSP_OPENIB=0 "${TENV[@]}" LD_LIBRARY_PATH="$LIBDIR" LD_PRELOAD="$PRELOAD")
run() { # run <round trips> <callgrind output>
    local n=$1 out=$2 fifo=$TMP/fifo.$1 sout=$TMP/server.$1
    mkfifo "$fifo"
    start_server "$sout" "${ENVV[@]}" taskset -c 1 "$TMP/instr_pp" s "$fifo"
    server_endpoint "$sout" '$1 == "EP" { print $2; exit }'
    "${ENVV[@]}" taskset -c 0 valgrind --tool=callgrind --collect-atstart=no \
        --toggle-collect=pp_loop --callgrind-out-file="$out" \
        "$TMP/instr_pp" c "$EP" "$fifo" "$n" "$XH" >"$out.log" 2>&1 ||
        { cat "$out.log" >&2; die "the client failed ($n round trips)"; }
    stop_server
}
# CRIT=1 and SERVER=1: a pscom_pp --sepbuf server under callgrind (with
# CRIT=1 collecting only on its critical paths: --collect-atstart=no)
run_pp_server() { # run_pp_server <round trips> <callgrind output> [valgrind options]
    local n=$1 out=$2 sout=$2.server
    shift 2
    start_server "$sout" "${ENVV[@]}" taskset -c 1 valgrind --tool=callgrind "$@" --callgrind-out-file="$out" \
        "$BUILD_DIR/bin/pscom_pp" -l 0 --once --sepbuf
    server_endpoint "$sout"
    "${ENVV[@]}" taskset -c 0 "$BUILD_DIR/bin/pscom_pp" -c "$EP" --minsize 8 --maxsize 8 \
        -n "$n" --warmup 10 --xheader "$XH" -t 100000000 >"$out.log" 2>&1 ||
        { cat "$out.log" >&2; die "the client failed ($n round trips)"; }
    wait_server # --once: it ends after the client
    [[ -s $out ]] || die "callgrind wrote no output for the server"
}
# ... and the ucx_perftest tag_lat responder (it takes a port number: a free
# one is picked at random and the start retried if it was taken)
run_server_tl() { # run_server_tl <round trips> <callgrind output>
    local n=$1 out=$2 port try i up
    for ((try = 0; try < 8; try++)); do
        port=$((20000 + RANDOM % 40000))
        ss -ltnH "sport = :$port" | grep -q . && continue
        start_server "$out.server" "${ENVV[@]}" taskset -c 1 valgrind --tool=callgrind --callgrind-out-file="$out" \
            ucx_perftest -p "$port"
        up=0
        for ((i = 0; i < 300; i++)); do # listening yet? (valgrind starts slowly)
            ss -ltnH "sport = :$port" | grep -q . && { up=1; break; }
            kill -0 "$SERVER_PID" 2>/dev/null || break
            sleep 0.1
        done
        if ((up)) && "${ENVV[@]}" taskset -c 0 ucx_perftest localhost -p "$port" -t tag_lat -s 8 \
            -n "$n" -w 10 >"$out.log" 2>&1; then
            wait_server
            [[ -s $out ]] || die "callgrind wrote no output for ucx_perftest"
            return 0
        fi
        stop_server
    done
    cat "$out.log" "$out.server" >&2 2>/dev/null
    die "ucx_perftest tag_lat failed ($n round trips)"
}
if [[ $SERVER == 1 ]]; then
    bench_build "$BUILD_DIR" pscom_pp
    run_pp_server "$W" "$TMP/cg.a"
    run_pp_server $((W + N)) "$TMP/cg.b"
    run_server_tl "$W" "$TMP/tl.a"
    run_server_tl $((W + N)) "$TMP/tl.b"
    WHAT="8 B round trip (xheader $XH), the whole echoing pscom_pp --sepbuf server"
elif [[ $CRIT == 1 ]]; then
    bench_build "$BUILD_DIR" pscom_pp
    run_pp_server "$W" "$TMP/cg.a" --collect-atstart=no
    run_pp_server $((W + N)) "$TMP/cg.b" --collect-atstart=no
    WHAT="8 B message (xheader $XH), critical path of the echoing server (recv_cb to ucp_tag_send_nbx)"
else
    run "$W" "$TMP/cg.a"
    run $((W + N)) "$TMP/cg.b"
    WHAT="8 B round trip (xheader $XH), client side"
fi

# --- per function and object -------------------------------------------------------
flat() { # self instructions per function: "<count> <object> <file:function>"
    callgrind_annotate --inclusive=no --auto=no --threshold=100 "$1" 2>/dev/null |
        awk '/^ *[0-9][0-9,]* \(/ && !/PROGRAM TOTALS/ {
            n = $1; gsub(",", "", n)
            line = $0; sub(/^ *[0-9,]+ +\([^)]*\) +/, "", line)
            obj = "(inlined)" # lines of inline functions: callgrind names no object
            if (match(line, /\[[^]]*\]$/)) { obj = substr(line, RSTART + 1, RLENGTH - 2); line = substr(line, 1, RSTART - 2) }
            sub(/.*\//, "", obj); sub(/\.so.*/, "", obj)
            fn = line; sub(/.*\//, "", fn)
            print n, obj, fn }'
}
report() { # report <callgrind a> <callgrind b> <what>: per object and function; total in $TMP/total
    flat "$1" >"$TMP/a.txt"
    flat "$2" >"$TMP/b.txt"
awk -v n="$N" -v top="$TOP" -v tr="$TRANSPORT" -v what="$3" -v totf="$TMP/total" '
    FNR == NR { a[$2 " " $3] += $1; next }
    { b[$2 " " $3] += $1 }
    END {
        for (k in a) if (!(k in b)) b[k] = 0
        for (k in b) {
            d = (b[k] - a[k]) / n
            split(k, p, " ")
            obj = p[1]; fn = p[2]
            # the FIFO read() is the harness, not the round trip
            if (fn ~ /(^|:)(read|__libc_read)$/ || fn ~ /^read\.c:/ || fn ~ /cancel/) { harness += d; continue }
            if (obj ~ /^(instr_pp|pscom_pp|ucx_perftest)/) obj = "program"
            byobj[obj] += d; total += d
            if (d >= 1) rows[++m] = sprintf("%9.1f  %-14s %s", d, obj, fn)
        }
        printf "# instructions per %s, %s: callgrind, %d round trips\n", what, tr, n
        printf "%-16s %9s\n", "object", "instr/RT"
        for (o in byobj) if (byobj[o] >= 0.5) printf "%-16s %9.0f\n", o, byobj[o] | "sort -k2 -nr"
        close("sort -k2 -nr")
        printf "%-16s %9.0f\n", "total", total
        printf "%.0f\n", total >totf
        if (harness >= 0.5) printf "(not counted: the harness FIFO read, %.0f)\n", harness
        printf "\n"
        printf "%9s  %-14s %s\n", "instr/RT", "object", "function"
        for (i = 1; i <= m; i++) print rows[i] | ("sort -nr | head -n " top)
    }' "$TMP/a.txt" "$TMP/b.txt"
}
report "$TMP/cg.a" "$TMP/cg.b" "$WHAT"
if [[ $SERVER == 1 ]]; then
    pp_total=$(cat "$TMP/total")
    echo
    report "$TMP/tl.a" "$TMP/tl.b" "8 B round trip, the whole ucx_perftest tag_lat responder"
    tl_total=$(cat "$TMP/total")
    echo
    awk -v p="$pp_total" -v t="$tl_total" 'BEGIN {
        printf "server work per 8 B round trip: pscom_pp --sepbuf %d, ucx_perftest tag_lat %d, ratio %.2f\n", p, t, p / t }'
fi
