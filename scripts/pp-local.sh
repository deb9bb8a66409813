#!/usr/bin/env bash
# Ping-pong between two local processes with pscom_pp; prints the
# latency/bandwidth table of the client. Arguments go to the client
# (e.g. --maxsize 65536). The transport is whatever the priorities pick;
# set PSP_* variables to choose, e.g. PSP_SHM=0 PSP_UCP=0 for tcp. The
# server's "New connection ... via <transport>" line follows the table.
set -euo pipefail
cd "$(dirname "$0")/.."
pp=${BUILD_DIR:-build}/bin/pscom_pp
[ -x "$pp" ] || { echo "pp-local: $pp not built (run scripts/setup.sh)" >&2; exit 1; }

# server on a kernel-chosen port, serving one client; read its call line
exec 3< <(exec "$pp" -l 0 -1 2>&1)
spid=$!
trap 'kill "$spid" 2>/dev/null || true' EXIT
ep=""
while IFS= read -r line <&3; do
  case "$line" in
    *" -c "*) ep=${line##* -c }; break ;;
  esac
done
[ -n "$ep" ] || { echo "pp-local: the server did not start" >&2; exit 1; }
"$pp" -c "$ep" "$@"
grep 'New connection' <&3 || true # let the server finish; say which transport
