#!/usr/bin/env bash
# Session 9, call F: the GPU tests on the build to commit; the collectives suite alone (a third sample);
# the collectives demo at its default sizes on 2 GPUs.
set -o pipefail
mkdir -p $OUT/r/coll
T0=$SECONDS
timeout 300 node_modules/.bin/vitest run test/gpu > $OUT/r/g.log 2>&1; echo "gpu tests exit $? after $((SECONDS - T0)) s"; grep -aE "Tests |Test Files|×|FAIL|skipped\)" $OUT/r/g.log | head -20
fig='const d=JSON.parse(require("fs").readFileSync(process.argv[1]));for(const f of d.figures) console.log(f.name,"|",typeof f.value==="number"?+f.value.toFixed(3):f.value,f.unit,"| base",typeof f.baseline==="number"?+f.baseline.toFixed(3):f.baseline,"| met",f.met,f.skipped??"")'
T0=$SECONDS
timeout 150 node dist/src/cli/main.js bench --driver native --suite collectives --out $OUT/r/coll --progress > $OUT/r/coll/stdout.txt 2> $OUT/r/coll/progress.log; echo "coll exit $? after $((SECONDS - T0)) s"
node -e "$fig" $OUT/r/coll/bench.json | grep -i "allreduce\|gradient"
T0=$SECONDS; timeout 150 node dist/src/cli/main.js demo --driver native --collectives --ranks 2 --json > $OUT/r/demo2.json 2> $OUT/r/demo2.err; echo "demo exit $? after $((SECONDS - T0)) s"
node -e 'const r=JSON.parse(require("fs").readFileSync(process.argv[1]));console.log("demo verified",r.verified,r.collectives.length,"cases", [...new Set(r.collectives.map(c=>c.algorithm))].join(","), r.mismatches.slice(0,3))' $OUT/r/demo2.json
cd $OUT && tar czf r.tgz r && rm -rf r
