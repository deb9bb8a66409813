#!/usr/bin/env bash
# Run the integration tests under valgrind's memcheck, over tcp, over shm
# and over openib on the software HCA (TRANSPORTS="tcp shm openib"): reads of uninitialised memory, which the ASan+UBSan job does not
# see. (ctest runs the fuzz targets' generated inputs under memcheck
# already: the tests labelled "valgrind".) Takes about 4 minutes here.
#
#   scripts/memcheck.sh [TEST...]     default: every itest_* that runs over
#                                     tcp and shm (see below)
#
# Left out: the ucp tests (UCX under memcheck), itest_rndv_huge (4 GiB),
# itest_fd_exhaustion (valgrind holds descriptors of its own), the shm
# tests that force single-copy (CMA) paths, and tests that force one
# transport. shm runs with PSP_SHM_CMA=0: memcheck cannot see a peer's
# process_vm_writev() into our memory and would report the received bytes
# as uninitialised. Prints one line per test and transport; the log of each
# is in ${OUT:-/tmp/pscom-memcheck}/<transport>.<test>.log. Exit code 1 if
# any test failed or memcheck reported anything.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${BUILD_DIR:-build}/test/integration
command -v valgrind >/dev/null || { echo "memcheck: valgrind not found (Debian: valgrind)" >&2; exit 2; }
[ -d "$bin" ] || { echo "memcheck: $bin not built (run scripts/setup.sh)" >&2; exit 2; }
out=${OUT:-/tmp/pscom-memcheck}
mkdir -p "$out"

tests=("$@")
if [ ${#tests[@]} -eq 0 ]; then
  tests=(itest_msg_sizes itest_order itest_any_source itest_truncation itest_probe itest_cancel
         itest_recv_accept itest_peer_close itest_stress itest_peer_killed itest_send_variants
         itest_wait_sleep itest_loopback itest_connect_errors itest_sockets itest_garbage
         itest_backlog itest_rma itest_rndv itest_rndv_death itest_group itest_threads
         itest_ondemand_mesh itest_ondemand_cross itest_ondemand_cases itest_connect_cycles
         itest_connect_storm itest_many_cons itest_precon_pending itest_rma_loopback
         itest_rndv_close)
fi

# openib (test/verbs_emul): the tests that run per transport, and its own
per_transport=" itest_msg_sizes itest_order itest_any_source itest_truncation itest_probe
  itest_cancel itest_recv_accept itest_peer_close itest_stress itest_peer_killed
  itest_send_variants itest_wait_sleep itest_rma itest_rndv itest_rndv_death itest_group
  itest_threads itest_rndv_close itest_openib "

bad=0
for tr in ${TRANSPORTS:-tcp shm openib}; do
  case $tr in
    tcp) env_=(PSP_SHM=0 PSP_UCP=0 PSCOM_TEST_CONTYPE=tcp) ;;
    shm) env_=(PSP_SHM_CMA=0 PSP_UCP=0) ;; # tests that switch shm off stay on tcp
    openib) env_=(PSP_TCP=0 PSP_SHM=0 PSP_UCP=0 PSP_OPENIB=1 PSCOM_TEST_CONTYPE=openib-emul
                  "PSP_PLUGINDIR=$(cd "${BUILD_DIR:-build}" && pwd)/test/openib_emul") ;;
  esac
  run=("${tests[@]}")
  [ "$tr" = openib ] && [ $# -eq 0 ] && run=(${per_transport})
  for t in "${run[@]}"; do
    [[ "$tr" != openib && "$t" = itest_openib ]] && continue
    log=$out/$tr.$t.log
    start=$(date +%s)
    env "${env_[@]}" PSCOM_TEST_TIMEOUT=300 timeout 900 \
      valgrind -q --error-exitcode=99 --track-origins=yes "$bin/$t" >"$log" 2>&1
    rc=$?
    reports=$(grep -c '^==[0-9]*== ' "$log")
    echo "$tr $t: exit $rc, memcheck lines $reports, $(($(date +%s) - start)) s"
    [ "$rc" -eq 0 ] && [ "$reports" -eq 0 ] || bad=1
  done
done
exit $bad
