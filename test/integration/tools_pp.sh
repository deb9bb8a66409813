#!/usr/bin/env bash
# tools_pp.sh - pscom_pp as users run and parse it (spec: tools.md, 6).
#
# Usage: tools_pp.sh PSCOM_PP CONTYPE
#   CONTYPE: the connection type the server must report (tcp, shm, ucp);
#   the transport itself is chosen by the PSP_* environment of the test.
#
# Checks, over that transport:
#   - the server's banner and its "New connection ... via CONTYPE" line,
#     and that -1 makes it exit after the client;
#   - the client's table: exact header rows, one row per size in the
#     documented sequence (+1 below 2, then x sqrt(2), rounded from the
#     unrounded product), the loop
#     count asked for, time and throughput in the documented formats and
#     consistent with each other (throughput = msize / time), " ok" from -V;
#   - --xheader is capped at 100;
#   - -i prints the histogram format;
#   - loops shrink by sqrt(2) (-t 0), rounded from the unrounded value;
#   - -V with wrong data (server --sepbuf): "Error in communication..." per
#     size, exit 1;
#   - a verbose server without -1 prints its report after each client;
#   - a client whose server is gone fails with an error, and does not hang;
#   - stdout is checked as users parse it; stderr may hold nothing but the
#     library's own log lines ("<PSP:...>", e.g. a PSP_* value adjusted);
#     with TOOLS_PP_STDERR_EXPECT (an ERE), both processes' stderr must
#     hold a line that matches it.
set -euo pipefail

PP=$1
CONTYPE=$2
TMP=$(mktemp -d "${TMPDIR:-/tmp}/tools_pp.XXXXXX")
SPID=
cleanup() {
    [[ -n $SPID ]] && kill "$SPID" 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*" >&2
    for f in "$TMP"/*.out "$TMP"/*.err; do
        [[ -e $f ]] && { echo "--- $f" >&2; cat "$f" >&2; }
    done
    exit 1
}

# Start a server serving one client (-1) on a free port; sets EP and SPID.
# The call line is read from its output as it comes (no sleeping).
start_server() {
    mkfifo "$TMP/srv.fifo"
    # Not under timeout(1): $! must be the server itself, so that the kill
    # below reaches it (timeout forwards no signal that comes before it
    # knows its child's pid, which happens on a loaded machine). ctest's
    # TIMEOUT bounds a hanging server; the trap kills it.
    local once=-1
    [[ -n ${NO_ONCE:-} ]] && once=
    "$PP" -l 0 $once "$@" >"$TMP/srv.fifo" 2>>"$TMP/server.err" &
    SPID=$!
    exec 3<"$TMP/srv.fifo"
    rm "$TMP/srv.fifo"
    : >"$TMP/server.out"
    EP=
    local line
    while IFS= read -r line <&3; do
        echo "$line" >>"$TMP/server.out"
        if [[ $line == *" -c "* ]]; then
            EP=${line##* -c }
            break
        fi
    done
    [[ -n $EP ]] || fail "server printed no call line"
}

# Let the server finish (it must exit by itself after the client: -1).
finish_server() {
    cat <&3 >>"$TMP/server.out"
    exec 3<&-
    local rc=0
    wait "$SPID" || rc=$?
    SPID=
    ((rc == 0)) || fail "server exited with $rc"
}

expect_line() { # file, line number, exact text
    local got
    got=$(sed -n "${2}p" "$1")
    [[ $got == "$3" ]] || fail "$(basename "$1") line $2: expected '$3', got '$got'"
}

# ---- 1. the table, with verification ------------------------------------------
start_server
expect_line "$TMP/server.out" 1 "Waiting for client."
expect_line "$TMP/server.out" 2 "Call client with:"
[[ $(sed -n 3p "$TMP/server.out") =~ ^.*pscom_pp\ -c\ [0-9.]+:[0-9]+@.+$ ]] ||
    fail "server call line: '$(sed -n 3p "$TMP/server.out")'"

timeout 60 "$PP" -c "$EP" --maxsize 1024 -n 25 -V >"$TMP/client.out" 2>>"$TMP/client.err" ||
    fail "client exited with $?"
finish_server
grep -q "^New connection from .* via $CONTYPE\$" "$TMP/server.out" ||
    fail "server did not report a $CONTYPE connection"

expect_line "$TMP/client.out" 1 "Xheader : 12 bytes"
expect_line "$TMP/client.out" 2 "$(printf '%7s %8s %8s %8s' msize loops time throughput)"
expect_line "$TMP/client.out" 3 "$(printf '%7s %8s %8s %8s' '[bytes]' '[cnt]' '[us/cnt]' '[MB/s]')"

# sizes: 0 1 2, then x sqrt(2), each rounded from the unrounded product (as the
# established tool: every second size a power of two; until 2026-11-29 each
# step was rounded and the sizes drifted: ... 528 747 1056)
expected_sizes=$(awk 'BEGIN { e = 0; s = 0; while (s <= 1024) { print s; if (e < 2) { e++; s = e } else { e *= sqrt(2); s = int(e + 0.5) } } }')
echo "$expected_sizes" | grep -qx 1024 || fail "the expected sizes miss 1024 (test bug)"
got_sizes=$(awk 'NR > 3 { print $1 }' "$TMP/client.out")
[[ $got_sizes == "$expected_sizes" ]] ||
    fail "sizes: expected $(echo $expected_sizes), got $(echo $got_sizes)"

awk 'NR > 3' "$TMP/client.out" >"$TMP/rows"
while IFS= read -r row; do
    # "%7lu %8u %8.2f %8.2f ok"
    [[ $row =~ ^\ *([0-9]+)\ +([0-9]+)\ +([0-9]+\.[0-9]{2})\ +([0-9]+\.[0-9]{2})\ ok$ ]] ||
        fail "row format: '$row'"
    [[ ${#row} -eq 37 ]] || fail "row width ${#row} (expected 7+1+8+1+8+1+8 + ' ok'): '$row'"
    ((BASH_REMATCH[2] == 25)) || fail "loops: '$row'"
    awk -v m="${BASH_REMATCH[1]}" -v t="${BASH_REMATCH[3]}" -v b="${BASH_REMATCH[4]}" \
        'BEGIN { if (t <= 0) exit 1
                 # time and throughput are both printed rounded to 0.01
                 lo = m / (t + 0.005); hi = t > 0.005 ? m / (t - 0.005) : 1e30
                 exit !(b >= lo - 0.006 && b <= hi + 0.006) }' ||
        fail "throughput is not msize / time: '$row'"
done <"$TMP/rows"

# ---- 2. --xheader capped at 100, histogram mode ---------------------------------
start_server
timeout 60 "$PP" -c "$EP" --minsize 8 --maxsize 8 -n 5 --xheader 200 -i >"$TMP/histo.out" 2>>"$TMP/client.err" ||
    fail "histogram client exited with $?"
finish_server
expect_line "$TMP/histo.out" 1 "Xheader : 100 bytes"
grep -qx "Message size       8. Rtt/2\[usec\]" "$TMP/histo.out" || fail "no histogram header"
n=$(grep -Ec '^ {0,4}[0-9]+ +[0-9]+\.[0-9]$' "$TMP/histo.out" || true)
((n == 5)) || fail "histogram: expected 5 rows of '%5d %8.1f', got $n"

# stderr: the library's log lines only (none with the defaults)
for f in "$TMP/server.err" "$TMP/client.err"; do
    [[ -e $f ]] || continue
    if grep -qv '^<PSP:.*>$' "$f"; then fail "$(basename "$f"): not a log line of the library"; fi
done
if [[ -n ${TOOLS_PP_STDERR_EXPECT:-} ]]; then
    for f in "$TMP/server.err" "$TMP/client.err"; do
        grep -Eq "$TOOLS_PP_STDERR_EXPECT" "$f" 2>/dev/null ||
            fail "$(basename "$f"): no line matching '$TOOLS_PP_STDERR_EXPECT'"
    done
fi

# ---- 2b. loops shrink by sqrt(2), rounded from the unrounded value -------------
# (-t 0: every size exceeds the budget; until 2026-11-29 each step was
# truncated: 1024 724 511 361 ...)
start_server
timeout 60 "$PP" -c "$EP" --maxsize 20 -t 0 -n 1024 >"$TMP/loops.out" 2>>"$TMP/client.err" ||
    fail "loops client exited with $?"
finish_server
got=$(awk 'NR > 3 { printf "%s ", $2 }' "$TMP/loops.out")
[[ $got == "1024 724 512 362 256 181 128 91 64 " ]] || fail "loops: got '$got'"

# ---- 2c. -V and wrong data: the error line, and on to the next size ------------
# (the server replies from a buffer of its own: --sepbuf; until 2026-11-29
# the row was printed with " failed")
start_server --sepbuf
rc=0
timeout 60 "$PP" -c "$EP" --minsize 4 --maxsize 8 -n 3 -V >"$TMP/verify.out" 2>>"$TMP/client.err" || rc=$?
finish_server
((rc == 1)) || fail "client with wrong data: exit $rc (expected 1)"
got=$(awk 'NR > 3' "$TMP/verify.out")
want=$(printf '%7lu Error in communication...\n' 4 6 8)
[[ $got == "$want" ]] || fail "wrong data: expected the error line per size, got '$got'"

# ---- 2d. a verbose server without -1 prints its report after each client --------
# (until 2026-11-29 only at its end, which never comes without -1)
NO_ONCE=1 start_server -v
timeout 60 "$PP" -c "$EP" --maxsize 8 -n 5 >/dev/null 2>>"$TMP/client.err" || fail "client exited with $?"
found=
while IFS= read -r line <&3; do
    echo "$line" >>"$TMP/server.out"
    if [[ $line == "# pscom_pp configuration:" ]]; then
        found=1
        break
    fi
done
[[ -n $found ]] || fail "the verbose server printed no report after its client"
kill "$SPID"
wait "$SPID" 2>/dev/null || true
SPID=
exec 3<&-

# ---- 3. the server is gone: an error, no hang -----------------------------------
start_server
kill "$SPID"
wait "$SPID" 2>/dev/null || true
SPID=
exec 3<&-
rc=0
# PSP_RETRY=1: refused connects are retried for PSP_RETRY seconds (10 by default)
PSP_RETRY=1 timeout 60 "$PP" -c "$EP" --maxsize 8 -n 5 >"$TMP/gone.out" 2>&1 || rc=$?
((rc != 0 && rc != 124)) || fail "client of a dead server: exit $rc (0: no error, 124: hang)"
[[ -s $TMP/gone.out ]] || fail "client of a dead server printed nothing"

echo "pscom_pp over $CONTYPE: ok"
