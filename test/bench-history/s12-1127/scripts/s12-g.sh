#!/bin/bash
# final build: test/gpu, then first-send + negotiation suites
cd "$(dirname "$0")/.."
mkdir -p $OUT/g
T0=$SECONDS
timeout 200 node_modules/.bin/vitest run test/gpu > $OUT/g/gpu-tests.txt 2>&1; echo "gpu tests rc=$? after $((SECONDS - T0)) s"
grep -aE "Tests |Test Files|×|FAIL" $OUT/g/gpu-tests.txt | head -12
node dist/src/cli/main.js bench --driver native --suite first-send,negotiation --json > $OUT/g/fs.json 2> $OUT/g/fs.err; echo "bench rc=$?"
node -e 'const d=JSON.parse(require("fs").readFileSync(process.argv[1]));for(const f of d.figures) console.log(f.name,"|",+f.value.toFixed(3),f.unit,f.stats?[+f.stats.min.toFixed(2),+f.stats.max.toFixed(2)]:"","met",f.met)' $OUT/g/fs.json
cd $OUT && tar czf g.tgz g && rm -rf g
