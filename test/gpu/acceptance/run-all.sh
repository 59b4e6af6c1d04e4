#!/bin/sh
# The GPU acceptance of this round in one go, each step time-boxed, every
# log in OUT (default ./gpu-acceptance), a summary line per step on stdout:
#   1. test/gpu (vitest), with MPS when ranks share the GPU (start it first:
#      nvidia-cuda-mps-control -d; SMCUDA_EXPECT_MPS=1 makes the tests insist);
#   2. lifetimes.mjs's persistent-transfer scenarios natively (no sanitizer);
#   3. the call check's and the flight recorder's cost per call;
#   4. the first message with and without the warm-up, sent right after connect
#      and after ep.negotiate();
#   5. the bench before/after, where BASE names another build's dist/
#      (BASE=../old/dist): base, this, base, this, each into OUT/bench-<tree>-<round>/bench.json;
#   6. run-sanitizer.sh (stop MPS first: the sanitizer does not run under it;
#      SKIP_SANITIZER=1 leaves it out).
#   npx tsc -p . && sh test/gpu/acceptance/run-all.sh
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
out=${OUT:-./gpu-acceptance}
mkdir -p "$out" && out=$(cd "$out" && pwd)
step() { # name limit command...
  name=$1 limit=$2
  shift 2
  t0=$(date +%s)
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  rc=$?
  echo "$name: exit $rc in $(($(date +%s) - t0)) s$([ "$rc" -eq 124 ] && echo ' (timed out)')"
}
cd "$root" || exit 2
# vitest from node_modules/.bin where it is on PATH (a machine without npm has no npx).
vitest=vitest; command -v vitest >/dev/null 2>&1 || vitest="npx vitest"
step gpu-tests "${T_TESTS:-420}" $vitest run test/gpu --reporter=verbose
grep -E "Test Files|Tests |^ +×" "$out/gpu-tests.log" | sed 's/\x1b\[[0-9;]*m//g'
for s in close-persistent close-persistent-ep; do step "native-$s" 120 node "$here/lifetimes.mjs" "$s"; tail -1 "$out/native-$s.log"; done
step call-check 60 node dist/src/bench/call-check-microbench.js
step flight-recorder 60 node dist/src/bench/flight-recorder-microbench.js
cat "$out/call-check.log" "$out/flight-recorder.log"
for mode in connect negotiate; do
  step "warm-up-$mode" 120 node test/gpu/measure-warm-up.mjs --pairs=6 --first-after=$mode
  tail -9 "$out/warm-up-$mode.log"
done
if [ -n "${BASE:-}" ]; then
  for round in 1 2; do
    for tree in base this; do
      d=dist; [ "$tree" = base ] && d=$BASE
      step "bench-$tree-$round" "${T_BENCH:-150}" node "$d/src/cli/main.js" bench --driver native --suite latency,cache,same-gpu,graph,collectives --sizes 8,1M,256M --out "$out/bench-$tree-$round"
    done
  done
fi
[ -n "${SKIP_SANITIZER:-}" ] || { step sanitizer "${T_SANITIZER:-1500}" sh "$here/run-sanitizer.sh"; grep -E "^(synccheck|memcheck) " "$out/sanitizer.log"; }
