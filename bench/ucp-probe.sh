#!/usr/bin/env bash
# ucp-probe.sh - which state is this host's shared-memory transfer in? The
# 8 B target of bench/ucp.sh (issue 6) depends on it: ucx_perftest tag_lat
# over UCX_TLS=posix,cma,self reads about 0.14-0.18 us in the host's fast
# state and 0.45-0.70 us in its slow one (bench/ucp-log.md), and only the
# fast state tells whether pscom keeps within 15 % of raw UCX there. Prints
# one reading (us, half round trip of 20000 8 B round trips, server and
# client pinned to cpu 1 and 0) per line.
#
# Usage: bench/ucp-probe.sh [N]     N readings (default 1)
#
# Environment:
#   WATCH=s    instead: probe every s seconds until stopped, print each
#              reading with the time, and take a sitting of the 8 B target
#              (SITTING, into the output) whenever a reading and the two
#              taken right after it are below FAST (one fast reading under
#              load, or in a burst of milliseconds, is not worth a sitting)
#   FAST=0.18  the fast-state threshold in us
#   SITTING='TLS=shm SIZES=8 TOOLS="pscom_sep tag_lat" R=16 ITERS=50000 bench/ucp.sh'
# The machine must be otherwise idle: any load reads as the slow state.
set -euo pipefail

# shellcheck source=lib.sh source-path=SCRIPTDIR
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

N=${1:-1}
need_posint N
FAST=${FAST:-0.18}
SITTING=${SITTING:-TLS=shm SIZES=8 TOOLS=\"pscom_sep tag_lat\" R=16 ITERS=50000 bench/ucp.sh}
command -v ucx_perftest >/dev/null || die "ucx_perftest not found (Debian: ucx-utils)"
UCXPT=ucx_perftest
bench_tmp pscom-ucp-probe
PIN_SERVER=(taskset -c 1)
PIN_CLIENT=(taskset -c 0)

probe() { # one reading: tag_lat's final average latency
    perftest "$TMP/probe" "UCX_TLS=posix,cma,self" -t tag_lat -s 8 -n 20000
    awk '/^Final:/ { print $4 }' "$TMP/probe"
}

if [[ -z ${WATCH:-} ]]; then
    for ((i = 0; i < N; i++)); do probe; done
    exit 0
fi
need_posint WATCH
fast() { awk -v v="$1" -v f="$FAST" 'BEGIN { exit !(v > 0 && v < f) }'; }
while true; do
    v=$(probe)
    echo "$(date +%H:%M:%S) $v"
    if fast "$v"; then
        v2=$(probe) && v3=$(probe)
        echo "$(date +%H:%M:%S) confirm: $v2 $v3"
    fi
    if fast "$v" && fast "$v2" && fast "$v3"; then
        echo "=== sitting $(date +%H:%M:%S), $(git -C "$REPO" rev-parse --short HEAD): $SITTING"
        (cd "$REPO" && eval "$SITTING") || note "the sitting failed"
        echo "=== end $(date +%H:%M:%S), probe $(probe)"
    fi
    sleep "$WATCH"
done
