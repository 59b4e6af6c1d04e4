#!/bin/sh
# Issue 25's sanitizer check on a GPU machine: persistent transfers captured
# in a CUDA graph and replayed (`smcuda demo --graph`, two ranks, flags by
# stream memory operations and by the flag kernel, the bytes
# of the sampled replays checked) and the graph-capture example, under
# compute-sanitizer's racecheck and synccheck (and memcheck), child
# processes included. Prints one line per run and exits non-zero if a run
# failed or the sanitizer reported an error.
#   npx tsc -p . && sh test/gpu/acceptance/run-sanitizer-graph.sh [replays]
# CUDA_VISIBLE_DEVICES picks the GPUs (one: both ranks share it);
# SANITIZER_TOOLS the tools (default: racecheck synccheck memcheck);
# SANITIZER_LOGS a folder to keep each run's whole log in.
set -u
here=$(dirname "$0")
root=$here/../../..
sanitizer=${COMPUTE_SANITIZER:-compute-sanitizer}
if ! command -v "$sanitizer" >/dev/null 2>&1; then
  for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer /opt/cuda/bin/compute-sanitizer; do
    [ -x "$c" ] && sanitizer=$c && break
  done
fi
command -v "$sanitizer" >/dev/null 2>&1 || [ -x "$sanitizer" ] || { echo "compute-sanitizer not found (set COMPUTE_SANITIZER)"; exit 2; }
replays=${1:-100}
status=0
check() { # name, command...
  name=$1; shift
  for tool in ${SANITIZER_TOOLS:-racecheck synccheck memcheck}; do
    log=$(mktemp)
    "$sanitizer" --tool "$tool" --target-processes all --error-exitcode 99 "$@" >"$log" 2>&1
    rc=$?
    summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | sort | uniq -c | tr '\n' ';')
    echo "$tool $name: exit $rc; $summary"
    if [ "$rc" -ne 0 ]; then status=1; sed -n '1,60p' "$log"; fi
    if [ -n "${SANITIZER_LOGS:-}" ]; then cp "$log" "$SANITIZER_LOGS/$tool-$(echo "$name" | tr -c 'a-z0-9\n' '_').log"; fi
    rm -f "$log"
  done
}
check "demo --graph" node "$root/dist/src/cli/main.js" demo --graph --driver native --ranks 2 --replays "$replays" --sizes 1M
check "demo --graph --flags kernel" node "$root/dist/src/cli/main.js" demo --graph --flags kernel --driver native --ranks 2 --replays "$replays" --sizes 1M
check "graph-capture.mjs" node "$root/docs/examples/graph-capture.mjs" "$replays"
exit $status
