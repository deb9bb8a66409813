# bench/lib.sh - what the benchmark scripts of bench/ share; sourced by them
# (after "set -euo pipefail"), not run:
#     . "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# It sets BENCH (the script's name, for messages), SCRIPT_DIR (bench/) and
# REPO, and defines the helpers below. Globals they read or set: TMP, KEEP,
# SERVER_PID, EP, SHARED_DIR, TOOLS, BUILD_DIR, BUILD_TYPE, LIBDIR, PP,
# PP_US/PP_MBS/PP_LAT, PIN, PIN_SERVER/PIN_CLIENT/PIN_SELF, PINNED, PIN_DESC,
# R, ITERS, SIZES, RESULTS, VERBOSE, MED/BST/CELLS, FMT_PREC, FMT_PREC_SMALL.
# shellcheck shell=bash
# shellcheck disable=SC2034 # globals set here are used by the scripts

BENCH=$(basename "${BASH_SOURCE[1]}")
SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SCRIPT_DIR/.." && pwd)

die() { echo "$BENCH: $*" >&2; exit 1; }
note() { echo "$BENCH: $*" >&2; }

# --- arguments ----------------------------------------------------------------
need_posint() { # need_posint <variable name>...: each must hold a positive integer
    local v
    for v; do
        [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer (got '${!v}')"
    done
}

need_words() { # need_words <variable name> <allowed words>: every word of the variable is one of them
    local x
    for x in ${!1}; do
        [[ " $2 " == *" $x "* ]] || die "$1: $x is not one of $2"
    done
}

# --- temporary directory, cleanup, background servers -------------------------
# bench_tmp <name> [what]: TMP = a new directory ${TMPDIR:-/tmp}/<name>.XXXXXX,
# removed at exit (with KEEP=1 kept, and "<what> kept in ..." said, default
# "raw outputs"); a server still running at exit (SERVER_PID) is stopped.
bench_tmp() {
    KEEP=${KEEP:-0}
    TMP_WHAT=${2:-raw outputs}
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
    SERVER_PID=
    trap bench_cleanup EXIT
}
bench_cleanup() {
    stop_server
    if [[ $KEEP == 1 ]]; then note "$TMP_WHAT kept in $TMP"; else rm -rf "$TMP"; fi
}

start_server() { # start_server <output file> <command...>: in the background as SERVER_PID
    local out=$1
    shift
    : >"$out" # exists at once: server_endpoint reads it
    "$@" >"$out" 2>&1 &
    SERVER_PID=$!
}
wait_server() { # the server ends by itself
    if [[ -n $SERVER_PID ]]; then
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=
    fi
}
stop_server() {
    [[ -z $SERVER_PID ]] || kill "$SERVER_PID" 2>/dev/null || true
    wait_server
}

# server_endpoint <output file> [awk program]: EP = what the program finds in
# the server's output (default: the endpoint of pscom_pp's "pscom_pp -c <ep>"
# line), waiting for it up to 30 s; dies when the server exits first
server_endpoint() {
    # shellcheck disable=SC2016 # an awk program
    local out=$1 prog=${2:-'$2 == "-c" { print $3; exit }'} i
    EP=
    for ((i = 0; i < 300; i++)); do
        EP=$(awk "$prog" "$out")
        [[ -n $EP ]] && return 0
        kill -0 "$SERVER_PID" 2>/dev/null || { cat "$out" >&2; die "the server exited"; }
        sleep 0.1
    done
    cat "$out" >&2
    die "the server printed no endpoint"
}

# shared_tools <files...>: TOOLS = shared/bench/tools (shared/ is SHARED_DIR,
# default <repo>/../shared), which must hold the files
shared_tools() {
    local f
    SHARED_DIR=${SHARED_DIR:-$REPO/../shared}
    TOOLS=$SHARED_DIR/bench/tools
    for f; do
        [[ -f $TOOLS/$f ]] ||
            die "cannot find $TOOLS/$f (shared/ is expected next to the repository, at $SHARED_DIR; set SHARED_DIR)"
    done
}

# --- build --------------------------------------------------------------------
# bench_configure <dir> [cmake options]: configures <dir> as a Release tree of
# the repository unless it is configured already
bench_configure() {
    local dir=$1
    shift
    [[ -f $dir/CMakeCache.txt ]] && return 0
    cmake -S "$REPO" -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >"$TMP/cmake-configure.log" 2>&1 ||
        { cat "$TMP/cmake-configure.log" >&2; die "configuring $dir failed"; }
}

bench_build() { # bench_build <dir> <targets...>
    local dir=$1 targets hint=
    shift
    targets=$*
    [[ " $targets " == *" pscom4ucp "* ]] && hint=" (is UCX found?)"
    cmake --build "$dir" --target "$@" -j "$(nproc 2>/dev/null || echo 2)" >>"$TMP/cmake-build.log" 2>&1 ||
        { tail -n 40 "$TMP/cmake-build.log" >&2; die "building ${targets// / and } in $dir failed$hint"; }
}

# bench_build_tree <default dir> <ON|OFF> <targets...>: builds the targets in
# BUILD_DIR, which must be a configured tree when given; else BUILD_DIR is
# <default dir>, configured on first use (PSCOM_BUILD_TESTS=ON|OFF). Sets
# BUILD_TYPE and LIBDIR, warns when it is not a Release build.
bench_build_tree() {
    local def=$1 tests=$2
    shift 2
    if [[ -n ${BUILD_DIR:-} ]]; then
        [[ -f $BUILD_DIR/CMakeCache.txt ]] || die "BUILD_DIR=$BUILD_DIR is not a configured build tree"
    else
        BUILD_DIR=$def
        bench_configure "$BUILD_DIR" -DPSCOM_BUILD_TESTS="$tests"
    fi
    bench_build "$BUILD_DIR" "$@"
    BUILD_TYPE=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt")
    [[ $BUILD_TYPE == Release ]] || note "warning: $BUILD_DIR is a '$BUILD_TYPE' build, not Release"
    LIBDIR=$BUILD_DIR/lib
}

tree_pscom_pp() { # PP = the pscom_pp of BUILD_DIR
    PP=$BUILD_DIR/bin/pscom_pp
    [[ -x $PP ]] || die "no pscom_pp at $PP"
}

# bench_pscom_pp <targets...>: PP = $PSCOM_PP if set (nothing is built), else
# the pscom_pp of BUILD_DIR (default <repo>/build-bench) after building the targets
bench_pscom_pp() {
    if [[ -n ${PSCOM_PP:-} ]]; then
        PP=$PSCOM_PP
        [[ -x $PP ]] || die "PSCOM_PP=$PP is not executable"
    else
        bench_build_tree "$REPO/build-bench" OFF "$@"
        tree_pscom_pp
    fi
}

build_tool() { # build_tool <source.c> [cc options]: compiles it (-O2 -std=gnu11) to $TMP/<name>
    local src=$1 name
    shift
    name=$(basename "$src" .c)
    ${CC:-cc} -O2 -std=gnu11 -o "$TMP/$name" "$src" "$@" || die "building $name failed"
}

build_pscom_tool() { # build_pscom_tool <source.c> [cc options]: the same, against BUILD_DIR's libpscom
    local src=$1
    shift
    build_tool "$src" "$@" -I"$REPO/include" -L"$LIBDIR" -lpscom -Wl,-rpath,"$LIBDIR"
}

# --- pinning ------------------------------------------------------------------
# pin_setup <modes>: PIN (default split; one of <modes>: split, same, none) into
#   PIN_SERVER, PIN_CLIENT  prefixes of server and client commands
#   PIN_SELF                prefix of tools that pin themselves (shm_floor,
#                           memcpy_bw, tcp_pp, ucp_pp: parent cpu 0, child cpu 1)
#   PINNED                  what is in effect: split (needs taskset and 2 cpus;
#                           else none), same or none
#   PIN_DESC                for the output; a script may word split its own way
pin_setup() {
    local modes=$1 list
    PIN=${PIN:-split}
    if [[ " $modes " != *" $PIN "* ]]; then
        list=${modes// /, }
        die "PIN must be ${list%, *} or ${list##*, } (got '$PIN')"
    fi
    PIN_SERVER=() PIN_CLIENT=() PIN_SELF=(env PP_NOPIN=1)
    PINNED=$PIN
    case $PIN in
    split)
        if command -v taskset >/dev/null && (($(nproc 2>/dev/null || echo 1) >= 2)); then
            PIN_SERVER=(taskset -c 1)
            PIN_CLIENT=(taskset -c 0)
            PIN_SELF=()
            PIN_DESC="servers on cpu 1, clients on cpu 0"
        else
            PINNED=none
            PIN_DESC="no pinning (needs taskset and 2 cpus)"
        fi
        ;;
    same)
        command -v taskset >/dev/null || die "PIN=same needs taskset"
        PIN_SERVER=(taskset -c 0)
        PIN_CLIENT=(taskset -c 0)
        PIN_SELF+=(taskset -c 0)
        PIN_DESC="everything on cpu 0"
        ;;
    none) PIN_DESC="no pinning" ;;
    esac
}

# --- measuring ------------------------------------------------------------------
iters_scaled() { # iters_scaled <size> <min>: ITERS up to 1 KiB, above max(<min>, ITERS*1024/size)
    local it
    if (($1 <= 1024)); then echo "$ITERS"; return; fi
    it=$((ITERS * 1024 / $1))
    ((it < $2)) && it=$2
    echo "$it"
}

rotate() { # rotate <n> <words...>: the words, rotated left by n
    local n=$1
    shift
    local -a w=("$@")
    local i k=${#w[@]}
    for ((i = 0; i < k; i++)); do printf '%s ' "${w[((i + n) % k + k) % k]}"; done
}

# bench_reps <function>: runs "<function> <rep>" for the warm-up repetition 0
# (into $TMP/results.warmup: not used) and the repetitions 1..R (into
# RESULTS=$TMP/results)
bench_reps() {
    local rep
    : >"$TMP/results"
    RESULTS=$TMP/results.warmup
    for ((rep = 0; rep <= R; rep++)); do
        ((rep == 1)) && RESULTS=$TMP/results
        "$1" "$rep"
        if ((rep == 0)); then echo "# warm-up done" >&2; else echo "# rep $rep/$R done" >&2; fi
    done
}

# pscom_pp client and server (the endpoint in EP, see server_endpoint)
# pp_client <output> <size> <round trips> <what failed> <command...>: one client
# run of the command (env, pinning, pscom_pp -c ... and options) for one size;
# its result line into PP_US (pscom_pp's time, 2 decimals), PP_MBS (its MB/s)
# and PP_LAT (size / MB/s: the more precise latency in us)
pp_client() {
    local out=$1 size=$2 n=$3 what=$4 row
    shift 4
    if ! timeout 300 "$@" --minsize "$size" --maxsize "$size" -n "$n" -t 100000000 >"$out" 2>&1; then
        cat "$out" >&2
        die "pscom_pp client failed ($what)"
    fi
    row=$(awk -v s="$size" '$1 == s && NF >= 4 && $2 ~ /^[0-9]+$/ {
        print $3, $4, ($4 > 0 ? $1 / $4 : $3); exit }' "$out")
    [[ -n $row ]] || { cat "$out" >&2; die "no result row for size $size in pscom_pp output"; }
    read -r PP_US PP_MBS PP_LAT <<<"$row"
}

# pp_server_done <server output> <contype> [who]: stops the pscom_pp server;
# dies unless every "New connection ... via <type>" line of it says <contype>
pp_server_done() {
    stop_server
    if ! awk -v t="$2" '/^New connection/ { n++; if ($NF != t) bad++ }
              END { exit !(n > 0 && bad == 0) }' "$1"; then
        cat "$1" >&2
        die "${3:-pscom} connections did not all use $2 (see server output above)"
    fi
}

# pp_sizes <rep> <contype> <PP_LAT|PP_US> <command...>: a pscom_pp server
# (PIN_SERVER) and one client run per size of SIZES (PIN_CLIENT, ITERS by
# iters_for <size>), both under the command (env ...); appends "pscom <rep>
# <size> <latency> <MB/s>" to RESULTS, the latency from PP_LAT or PP_US
pp_sizes() {
    local rep=$1 contype=$2 lat=$3 out=$TMP/pscom-server.$1 size
    shift 3
    start_server "$out" "$@" "${PIN_SERVER[@]}" "$PP" -l 0
    server_endpoint "$out"
    for size in $SIZES; do
        pp_client "$TMP/pscom-client.$rep.$size" "$size" "$(iters_for "$size")" "size $size, rep $rep" \
            "$@" "${PIN_CLIENT[@]}" "$PP" -c "$EP"
        echo "pscom $rep $size ${!lat} $PP_MBS" >>"$RESULTS"
    done
    pp_server_done "$out" "$contype"
}

free_port() { # a free TCP port (bound to port 0 by python3; without it a random one)
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' \
        2>/dev/null || echo $((20000 + RANDOM % 40000))
}

# perftest <output> <UCX environment (words)> <ucx_perftest client options...>:
# one ucx_perftest ($UCXPT) server (PIN_SERVER) and client (PIN_CLIENT) on a
# free port, tried again on another one (8 times) unless the client ends well
# with a "Final:" line
perftest() {
    local out=$1 uenv=$2 try port
    shift 2
    for ((try = 0; try < 8; try++)); do
        port=$(free_port)
        # shellcheck disable=SC2086 # uenv: words
        start_server "$out.server" env $uenv "${PIN_SERVER[@]}" "$UCXPT" -p "$port"
        sleep 0.3 # the server has no "ready" output; the client retries the connection itself
        # shellcheck disable=SC2086
        if timeout 300 env $uenv "${PIN_CLIENT[@]}" "$UCXPT" localhost -p "$port" "$@" >"$out" 2>&1 &&
            grep -q '^Final:' "$out"; then
            stop_server
            return 0
        fi
        stop_server
    done
    cat "$out" "$out.server" >&2
    die "ucx_perftest $* failed ($uenv)"
}

# --- statistics ---------------------------------------------------------------------
# Results files (RESULTS) of lines "<key...> <rep> <size> <half_rtt_us> <MBps>";
# the value of a size is the latency at 8 B, else the bandwidth.
values() { # values <key> <size>: sorted ascending; <key>: the words before rep
    awk -v k="$1" -v s="$2" '{ key = $1; for (i = 2; i <= NF - 4; i++) key = key " " $i }
        key == k && $(NF - 2) == s { print (s == 8 ? $(NF - 1) : $NF) }' "$RESULTS" | sort -g
}

rep_ratios() { # rep_ratios <key a> <key b> <size>: a / b per repetition, sorted
    awk -v a="$1" -v b="$2" -v s="$3" '{ key = $1; for (i = 2; i <= NF - 4; i++) key = key " " $i
            v = (s == 8 ? $(NF - 1) : $NF) }
        $(NF - 2) == s && key == a { x[$(NF - 3)] = v }
        $(NF - 2) == s && key == b { y[$(NF - 3)] = v }
        END { for (k in x) if ((k in y) && y[k] > 0) print x[k] / y[k] }' "$RESULTS" | sort -g
}

median() { # stdin: sorted numbers; nan for none
    awk '{ v[NR] = $1 } END {
        if (NR == 0) { print "nan"; exit }
        if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

best() { # best <size|lat|bw>: stdin sorted ascending; the lowest latency (size 8), the highest bandwidth
    if [[ $1 == 8 || $1 == lat ]]; then head -n 1; else tail -n 1; fi
}

# stat_cells <key prefix> <size> <tools...>: MED[tool] and BST[tool], median
# and best of the values of "<prefix><tool>", and CELLS, " %9s %9s" of them each
declare -gA MED=() BST=()
stat_cells() {
    local pre=$1 size=$2 tool
    shift 2
    MED=() BST=() CELLS=
    for tool; do
        MED[$tool]=$(values "$pre$tool" "$size" | median)
        BST[$tool]=$(values "$pre$tool" "$size" | best "$size")
        CELLS+=$(printf ' %9s %9s' "$(fmt "${MED[$tool]}")" "$(fmt "${BST[$tool]}")")
    done
}

size_label() { # size_label <size>: the row label of the tables
    case $1 in
    8) echo "8 B latency [us]" ;;
    65536) echo "64 KiB bw [MB/s]" ;;
    1048576) echo "1 MiB bw [MB/s]" ;;
    4194304) echo "4 MiB bw [MB/s]" ;;
    esac
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "nan" || b == "nan" || b <= 0) print "nan"; else print a / b }'; }

# fmt <x>: >= 100 no decimals, >= 10 one, >= 1 FMT_PREC (default 2), below
# FMT_PREC_SMALL (default FMT_PREC); "n/a" for nan or nothing
fmt() {
    awk -v x="$1" -v p="${FMT_PREC:-2}" -v q="${FMT_PREC_SMALL:-${FMT_PREC:-2}}" 'BEGIN {
        if (x == "nan" || x == "") print "n/a"; else if (x >= 100) printf "%.0f", x
        else if (x >= 10) printf "%.1f", x; else if (x >= 1) printf "%." p "f", x; else printf "%." q "f", x }'
}

print_reps() { # print_reps <columns> <sort options...>: with VERBOSE=1, every result line
    [[ ${VERBOSE:-0} == 1 ]] || return 0
    echo
    echo "per repetition ($1):"
    shift
    sort "$@" "$RESULTS"
}
