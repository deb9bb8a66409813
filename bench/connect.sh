#!/usr/bin/env bash
# connect.sh - connection scaling: time to connect N local processes
# all-to-all (on demand and DIRECT) and the memory one connection costs.
#
# Usage: bench/connect.sh [R]        (R = repetitions, default 3; or R=... in env)
#
# Environment:
#   R=3             repetitions of every (transport, N, mode) point, interleaved
#   PROCS="8 16 32 64"   process counts
#   TRANSPORTS="tcp shm" transports: tcp = PSP_SHM=0, shm = shm between the
#                   processes (the handshake always runs over TCP)
#   BUILD_DIR=dir   use this configured build tree (needs the tests: it runs
#                   test/integration/itest_ondemand_mesh); default
#                   <repo>/build-bench-connect, configured as Release on first use
#   MESH=path       use this itest_ondemand_mesh binary, build nothing
#   KEEP=1          keep the temporary directory with all raw outputs
#
# Every run starts N processes that each listen, exchange endpoint strings
# (through the launcher, not pscom), meet at a barrier and then either
#   ondemand: pscom_connect(ONDEMAND) to every peer and send one 0-byte
#             message to every peer - the first write makes the connection
#   direct:   pscom_connect(DIRECT) to every higher rank (blocking, one after
#             the other), accept the lower ones, send one message to every peer
# and receive one from every peer. "connect" is the wall time from the
# barrier until the last process is done (measured by the launcher).
# Memory per connection end: the increase of each process's RSS and of its
# malloc'ed heap (glibc mallinfo2) over that phase, summed over the
# processes and divided by the N*(N-1) connection ends. Kernel socket
# buffers are not in either number.
#
# Output: one table per transport with medians over R; see bench/README.md.
set -euo pipefail

# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

R=${1:-${R:-3}}
PROCS=${PROCS:-"8 16 32 64"}
TRANSPORTS=${TRANSPORTS:-"tcp shm"}

need_posint R
for n in $PROCS; do
    [[ $n =~ ^[0-9]+$ && $n -ge 2 && $n -le 128 ]] || die "process counts must be 2..128 (got '$n')"
done
for t in $TRANSPORTS; do
    [[ $t == tcp || $t == shm ]] || die "transports are tcp and shm (got '$t')"
done

bench_tmp pscom-connect-bench

# --- the driver: itest_ondemand_mesh --bench N MODE ------------------------
if [[ -n ${MESH:-} ]]; then
    [[ -x $MESH ]] || die "MESH=$MESH is not executable"
else
    bench_build_tree "$REPO/build-bench-connect" ON itest_ondemand_mesh
    MESH=$BUILD_DIR/test/integration/itest_ondemand_mesh
fi
max_procs=0
for n in $PROCS; do ((n > max_procs)) && max_procs=$n; done
# every process holds N-1 connections (+ a few fds); the soft limit is per process
need=$((max_procs + 64))
if (($(ulimit -n) < need)); then
    ulimit -n "$need" 2>/dev/null || die "ulimit -n is below $need and cannot be raised"
fi

run_one() { # transport n mode -> appends "connect_ms rss heap" to $TMP/<t>.<n>.<mode>
    local t=$1 n=$2 mode=$3 env=(PSP_UCP=0)
    [[ $t == tcp ]] && env+=(PSP_SHM=0)
    local out
    out=$(env "${env[@]}" "$MESH" --bench "$n" "$mode" 2>"$TMP/err.$t.$n.$mode") ||
        die "$MESH --bench $n $mode ($t) failed: $(tail -5 "$TMP/err.$t.$n.$mode")"
    # "<n> <mode> <connect_ms> <rss_per_con> <heap_per_con>"
    set -- $out
    [[ $# -eq 5 && $1 == "$n" && $2 == "$mode" ]] || die "unexpected output: $out"
    echo "$3 $4 $5" >>"$TMP/$t.$n.$mode"
}

median_of() { # median_of <column> <file>
    awk -v c="$1" '{ print $c }' "$2" | sort -g | median
}

echo "connect.sh: $MESH, R=$R, processes: $PROCS, transports: $TRANSPORTS" >&2
for ((rep = 0; rep < R; rep++)); do
    for n in $PROCS; do
        for t in $TRANSPORTS; do
            # alternate the order of the modes between repetitions
            if ((rep % 2)); then modes="direct ondemand"; else modes="ondemand direct"; fi
            for mode in $modes; do run_one "$t" "$n" "$mode"; done
        done
    done
    echo "connect.sh: repetition $((rep + 1))/$R done" >&2
done

echo "pscom $(git -C "$REPO" describe --always --dirty 2>/dev/null || echo '?'), $(nproc) CPUs, median of $R"
for t in $TRANSPORTS; do
    echo
    if [[ $t == tcp ]]; then
        echo "transport tcp (PSP_SHM=0 PSP_UCP=0)"
    else
        echo "transport shm (PSP_UCP=0; handshake over TCP)"
    fi
    printf '%6s %8s | %14s %14s | %16s %16s | %15s %15s\n' \
        procs conns "ondemand [ms]" "direct [ms]" "RSS/con od [KiB]" "RSS/con dir [KiB]" \
        "heap/con od [B]" "heap/con dir [B]"
    for n in $PROCS; do
        od=$TMP/$t.$n.ondemand
        di=$TMP/$t.$n.direct
        printf '%6d %8d | %14.0f %14.0f | %16.1f %16.1f | %15.0f %15.0f\n' \
            "$n" $((n * (n - 1) / 2)) \
            "$(median_of 1 "$od")" "$(median_of 1 "$di")" \
            "$(awk -v v="$(median_of 2 "$od")" 'BEGIN { print v / 1024 }')" \
            "$(awk -v v="$(median_of 2 "$di")" 'BEGIN { print v / 1024 }')" \
            "$(median_of 3 "$od")" "$(median_of 3 "$di")"
    done
done
