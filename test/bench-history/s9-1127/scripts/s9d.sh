#!/usr/bin/env bash
# Session 9, call D: the full bench on the build to commit, then the collectives suite alone (a second sample).
set -o pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/bench $OUT/coll
T0=$SECONDS
timeout 400 node dist/src/cli/main.js bench --driver native --suite latency,bandwidth,streaming,cache,ipc,same-gpu,negotiation,memory,bidirectional,all-to-all,first-send,memory-across,graph,collectives --out $OUT/bench --progress > $OUT/bench/stdout.txt 2> $OUT/bench/progress.log; echo "bench exit $? after $((SECONDS - T0)) s"
tail -2 $OUT/bench/progress.log
fig='const d=JSON.parse(require("fs").readFileSync(process.argv[1]));for(const f of d.figures) console.log(f.name,"|",typeof f.value==="number"?+f.value.toFixed(3):f.value,f.unit,"| base",typeof f.baseline==="number"?+f.baseline.toFixed(3):f.baseline,"| met",f.met,f.skipped??"")'
node -e "$fig" $OUT/bench/bench.json
T0=$SECONDS
timeout 150 node dist/src/cli/main.js bench --driver native --suite collectives --out $OUT/coll --progress > $OUT/coll/stdout.txt 2> $OUT/coll/progress.log; echo "coll exit $? after $((SECONDS - T0)) s"
node -e "$fig" $OUT/coll/bench.json | grep -i "allreduce\|gradient"
cd $OUT && tar czf bench.tgz bench coll && rm -rf bench coll
