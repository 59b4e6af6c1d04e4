#!/usr/bin/env bash
# Session 9, call H: the collectives suite twice with the first size's 1 s warm-up.
set -o pipefail
fig='const d=JSON.parse(require("fs").readFileSync(process.argv[1]));for(const f of d.figures) if (/allreduce f32|gradient/.test(f.name)) console.log(f.name,"|",+f.value.toFixed(3),f.unit,"[",f.stats?+f.stats.min.toFixed(2):"","-",f.stats?+f.stats.max.toFixed(2):"","] enq",f.details?.enqueueUs?.toFixed?.(2),"| base",typeof f.baseline==="number"?+f.baseline.toFixed(3):f.baseline,"| met",f.met)'
for i in 1 2; do
  mkdir -p $OUT/c$i; T0=$SECONDS
  timeout 160 node dist/src/cli/main.js bench --driver native --suite collectives --out $OUT/c$i --progress > $OUT/c$i/stdout.txt 2> $OUT/c$i/progress.log; echo "coll$i exit $? after $((SECONDS - T0)) s"
  node -e "$fig" $OUT/c$i/bench.json
done
cd $OUT && tar czf c.tgz c1 c2 && rm -rf c1 c2
