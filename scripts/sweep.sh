#!/usr/bin/env bash
# Run the integration suite once per setting (PSP_*/UCX_* values other than
# the defaults) and print which tests failed under which setting. Most
# failures under a setting are tests that assume a default (they say so in
# their message); the rest are faults: 2026-11-28 found a hang with
# PSP_UCP_MAX_RECV=1, stalls with small PSP_TCP_SNDBUF/RCVBUF and a test
# that needed credits it did not progress for (openib with one send slot).
# 2026-11-29 (twentieth session): the tests that still assumed a default
# now set it for themselves or skip that check (itest_ucp busy_wait,
# eager_burst and its log counts, itest_ucp_garbage, itest_rma after
# deregistration over shm, itest_openib's broken packets, shm_info_config).
#
#   scripts/sweep.sh                      the settings below, build/ (configured)
#   scripts/sweep.sh "PSP_X=1 PSP_Y=2" …  these settings (one run each)
#
# Environment: BUILD_DIR (default build), JOBS (default 3), EXCLUDE (ctest -E
# regex; default: the 4 GiB and 1,000-connection tests and the install test),
# LOGDIR (where the output of failed tests goes).
# A run takes 1-2 minutes on 2 cpus; a hang costs its test's 60 s watchdog.
#
# The UCX transports of the ucp-shm/ucp-tcp tests are cache variables of the
# build (their ctest environment wins over ours), so other UCX_TLS sets are
# swept with a build directory of their own, e.g.
#   cmake -B build-tls -DPSCOM_TEST_UCX_TLS_SHM=sysv,cma,self
#   BUILD_DIR=build-tls scripts/sweep.sh "PSP_DEBUG=1"
# (2026-11-29: sm, posix, sysv,cma,self, posix,self, all and shm,tcp for
# ucp-shm, tcp,self and all for ucp-tcp: all pass; cma,self or self alone
# reach no peer, and connections fail with one error line, or fall back to
# tcp where it is enabled.)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
jobs=${JOBS:-3}
exclude=${EXCLUDE:-rndv_huge|many_cons|fd_exhaustion|install_consumer}
[[ -f $build/CTestTestfile.cmake ]] || {
  echo "sweep: $build is not a configured build (scripts/setup.sh)" >&2
  exit 1
}

settings=("$@")
if ((${#settings[@]} == 0)); then
  settings=(
    "PSP_RENDEZVOUS=1024" "PSP_READAHEAD=100000" "PSP_UNEXPECTED_RECEIVES=1"
    "PSP_SCHED_YIELD=1" "PSP_WAIT_SPIN_US=0" "PSP_GUARD=1" "PSP_IPROBE_COUNT=5"
    "PSP_PRECON_TCP_NODELAY=0" "PSP_PRECON_TCP_RECONNECT_TIMEOUT=50"
    "PSP_TCP_SNDBUF=4096 PSP_TCP_RCVBUF=4096"
    "PSP_SHM_CMA=0" "PSP_SHM_RENDEZVOUS=0" "PSP_SHM_RING_SIZE=1 PSP_SHM_CHUNK=1"
    "PSP_SHM_RING_BUDGET=1"
    "PSP_UCP_MAX_RECV=1" "PSP_UCP_ERR_HANDLING=1" "PSP_UCP_EP_LINGER=0"
    "PSP_UCP_SMALL_MSG_LEN=1024" "PSP_UCP_FASTINIT=0" "UCX_RNDV_THRESH=2k"
    "PSP_OPENIB_RECVQ_SIZE=3 PSP_OPENIB_SENDQ_SIZE=1 PSP_OPENIB_PENDING_TOKENS=1"
    "PSP_OPENIB_COMPQ_SIZE=1" "PSP_OPENIB_RDMA_READ=1" "PSP_OPENIB_RNDV_FALLBACKS=0"
  )
fi

# The output of failed tests is kept: $LOGDIR/<setting>.log (default
# /tmp/pscom-sweep.<pid>; 2026-11-29 a failure seen once under a setting
# could not be read afterwards).
logdir=${LOGDIR:-/tmp/pscom-sweep.$$}
mkdir -p "$logdir"
for s in "${settings[@]}"; do
  read -r -a vars <<<"$s"
  out=$(env "${vars[@]}" ctest --test-dir "$build" -L integration -E "$exclude" \
    -j"$jobs" --timeout 120 --output-on-failure 2>&1 || true)
  echo "== $s: $(grep -o '[0-9]*% tests passed.*' <<<"$out" || echo 'no result')"
  if grep -E '\((Failed|Timeout|SEGFAULT|Subprocess aborted)\)' <<<"$out"; then
    log="$logdir/${s// /_}.log"
    printf '%s\n' "$out" >"$log"
    echo "   output: $log"
  fi
done
