#!/usr/bin/env bash
# PROTOTYPE A/B: FIN announced at launch by an interprocess event (SMCUDA_DEV_EARLY_FIN=1) against FINs after completion
set -o pipefail
show() { node -e 'const d=JSON.parse(require("fs").readFileSync(process.argv[1]));for(const f of d.figures) if (f.target && typeof f.value==="number") console.log("  ",f.name.slice(0,60),"|",+f.value.toFixed(2),f.unit,"| runs",JSON.stringify((f.details?.runsGBs??f.details?.runsUs??[]).map(v=>+v.toFixed(1))),"| base",typeof f.baseline==="number"?+f.baseline.toFixed(2):"")' $1; }
for i in 1 2; do for ef in 0 1; do
  echo "== cross-GPU, EARLY_FIN=$ef, round $i"
  SMCUDA_DEV_EARLY_FIN=$ef timeout 120 node dist/src/cli/main.js bench --driver native --suite streaming,latency --sizes 8,1M --out $OUT/b-$ef-$i > /dev/null 2>&1; show $OUT/b-$ef-$i/bench.json
  SMCUDA_DEV_EARLY_FIN=$ef SIZE=1048576 DEV1=1 N=3000 RUNS=3 timeout 60 node .dev-main/stream-ready.mjs 2>&1 | tail -1 | cut -c1-120
done; done
source .gpu/mps.sh start
for i in 1 2; do for ef in 0 1; do for sz in 1048576 4194304; do
  echo "== same GPU MPS, EARLY_FIN=$ef, $sz, round $i"
  SMCUDA_DEV_EARLY_FIN=$ef SIZE=$sz DEV1=0 N=3000 RUNS=3 timeout 60 node .dev-main/stream-ready.mjs 2>&1 | tail -2 | cut -c1-140
done; done; done
source .gpu/mps.sh stop
cd $OUT && tar czf out.tgz b-* && rm -rf b-*
