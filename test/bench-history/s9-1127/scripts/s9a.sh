#!/usr/bin/env bash
# Session 9, call A: (1) the first size's slowness in fresh processes (40 runs of 1000 calls, 8 B) with the
# GPU clocks sampled, and with the poller's spin off; (2) marks recorded once a turn (dist-var) against a
# record a call (dist); (3) the two-shot grid capped at 256 (dist-256) against 264 (dist); (4) GPU tests.
set -o pipefail
mkdir -p $OUT/r
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,pstate,clocks.max.sm --format=csv,noheader
C1='[{"bytes":8,"warmup":100}]'
for t in a nospin b; do
  nvidia-smi --query-gpu=index,clocks.sm,clocks.mem,pstate,power.draw --format=csv,noheader -lms 50 > $OUT/r/clocks-$t.csv 2>&1 &
  SMI=$!
  sleep 0.5
  if [ $t = nospin ]; then export SMCUDA_POLL_SPIN_US=0; else unset SMCUDA_POLL_SPIN_US; fi
  RUNS=40 ITERS=1000 CASES=$C1 timeout 60 node test/gpu/measure-collectives.mjs 2 > $OUT/r/first-$t.json 2> $OUT/r/first-$t.err; echo "first-$t $?"
  sleep 0.3; kill $SMI; unset SMCUDA_POLL_SPIN_US
  node -e 'const d=JSON.parse(require("fs").readFileSync(process.argv[1]));const f=d.figures[0];console.log(process.argv[1].split("/").pop(),"perRun",f.perRunUs.join(" "));console.log("  enq0",f.enqueueUsByRank[0].join(" "))' $OUT/r/first-$t.json
done
C2='[{"bytes":8,"warmup":20000},{"bytes":1024},{"bytes":16384},{"bytes":262144},{"bytes":1048576},{"bytes":16777216},{"bytes":8,"graph":true}]'
for i in 1 2 3; do
  for v in dist dist-var; do
    DIST=$v CASES=$C2 timeout 90 node test/gpu/measure-collectives.mjs 2 > $OUT/r/ab-$v-$i.json 2> $OUT/r/ab-$v-$i.err; echo "ab $v $i $?"
    node -e 'const d=JSON.parse(require("fs").readFileSync(process.argv[1]));console.log(process.argv[1].split("/").pop(), d.figures.map(f=>`${f.bytes}${f.graph?"g":""}:${f.medianUs}[${f.minUs}-${f.maxUs}] e${f.enqueueMedianUs}`).join("  "))' $OUT/r/ab-$v-$i.json
  done
done
C3='[{"bytes":16777216,"warmup":300},{"bytes":16777216},{"bytes":268435456},{"bytes":1073741824}]'
for i in 1 2; do
  for v in dist dist-256; do
    DIST=$v CASES=$C3 timeout 90 node test/gpu/measure-collectives.mjs 2 > $OUT/r/grid-$v-$i.json 2> $OUT/r/grid-$v-$i.err; echo "grid $v $i $?"
    node -e 'const d=JSON.parse(require("fs").readFileSync(process.argv[1]));console.log(process.argv[1].split("/").pop(), d.figures.map(f=>`${f.bytes}:${f.medianUs}[${f.minUs}-${f.maxUs}] ${f.busGBs}GB/s`).join("  "))' $OUT/r/grid-$v-$i.json
  done
done
timeout 220 node_modules/.bin/vitest run test/gpu/collectives.gpu.test.ts test/gpu/gpu-driven.gpu.test.ts > $OUT/r/g.log 2>&1; echo "gpu tests exit $?"; grep -aE "Tests|Test Files|×|FAIL" $OUT/r/g.log | head -12
cd $OUT && tar czf r.tgz r && rm -rf r
