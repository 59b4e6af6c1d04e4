#!/usr/bin/env bash
# Session 9, call E: a CPU profile of each rank at 256 KiB (2 ranks); 4 and 8 ranks on 2 GPUs with MPS (the
# collectives suite, every call verified); the GPU tests.
set -o pipefail
mkdir -p $OUT/r/prof $OUT/r/b4 $OUT/r/b8
CPU_PROF_DIR=$OUT/r/prof RUNS=10 CASES='[{"bytes":262144,"warmup":5000}]' timeout 60 node test/gpu/measure-collectives.mjs 2 > $OUT/r/prof/m.json 2> $OUT/r/prof/m.err; echo "prof exit $?"; cut -c1-300 $OUT/r/prof/m.json
fig='const d=JSON.parse(require("fs").readFileSync(process.argv[1]));for(const f of d.figures) console.log(f.name,"|",typeof f.value==="number"?+f.value.toFixed(3):f.value,f.unit,"| met",f.met,f.skipped??"")'
source .gpu/mps.sh start
for n in 4 8; do
  T0=$SECONDS
  timeout 200 node dist/src/cli/main.js bench --driver native --suite collectives --ranks $n --sizes 8,256K,1M,16M,256M --out $OUT/r/b$n --progress > $OUT/r/b$n/stdout.txt 2> $OUT/r/b$n/progress.log; echo "bench$n exit $? after $((SECONDS - T0)) s"
  node -e "$fig" $OUT/r/b$n/bench.json | grep -i "smcuda"
  grep -ai "verified\|wrong" $OUT/r/b$n/stdout.txt | head -3
done
source .gpu/mps.sh stop
cd $OUT && tar czf r.tgz r && rm -rf r
