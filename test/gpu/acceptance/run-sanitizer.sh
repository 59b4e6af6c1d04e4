#!/bin/sh
# Issues 24's and 43's acceptance on a GPU machine: every lifetime scenario
# of lifetimes.mjs (transports; a persistent transfer; a communicator) under
# compute-sanitizer, synccheck first (seconds a scenario), then memcheck
# (minutes for the 256 MiB ones), child processes included. Each run is
# limited to SANITIZER_LIMIT seconds (default 240): one that hangs is
# reported as such (exit 124) and the others still run. The persistent
# transfer's rounds are LIFETIMES_PT_MB MiB here (default 32).
# Prints one line per run and exits non-zero if any scenario failed or the
# sanitizer reported an error.
#   npx tsc -p . && sh test/gpu/acceptance/run-sanitizer.sh [scenario ...]
set -u
here=$(dirname "$0")
sanitizer=${COMPUTE_SANITIZER:-compute-sanitizer}
command -v "$sanitizer" >/dev/null 2>&1 || { echo "compute-sanitizer not found (set COMPUTE_SANITIZER)"; exit 2; }
scenarios=${*:-"two-transports close-rget close-rget-fd close-staged peer-sigkill close-persistent close-persistent-ep close-comm comm-peer-sigkill"}
limit=${SANITIZER_LIMIT:-240}
export LIFETIMES_PT_MB=${LIFETIMES_PT_MB:-32}
status=0
for tool in synccheck memcheck; do
  for s in $scenarios; do
    log=$(mktemp)
    t0=$(date +%s)
    timeout "$limit" "$sanitizer" --tool "$tool" --target-processes all --error-exitcode 99 node "$here/lifetimes.mjs" "$s" >"$log" 2>&1
    rc=$?
    summary=$(grep -E "ERROR SUMMARY" "$log" | sort | uniq -c | tr '\n' ';')
    echo "$tool $s: exit $rc in $(($(date +%s) - t0)) s$([ "$rc" -eq 124 ] && echo ' (timed out)'); $summary $(grep -E "^$s:" "$log" | tail -1)"
    if [ "$rc" -ne 0 ]; then status=1; sed -n '1,60p' "$log"; fi
    rm -f "$log"
  done
done
exit $status
