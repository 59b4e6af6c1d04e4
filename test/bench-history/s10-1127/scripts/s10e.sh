#!/usr/bin/env bash
# Same-GPU copies by the copy kernel: GPU tests, then same-gpu / all-to-all A/B (dist-base = d830f23, dist = this build).
mkdir -p $OUT/r
T0=$SECONDS
timeout 240 node_modules/.bin/vitest run test/gpu > $OUT/r/gpu-tests.txt 2>&1; echo "gpu tests exit $? after $((SECONDS - T0)) s"
grep -aE "Tests |Test Files|×|FAIL|skipped\)|copy kernel" $OUT/r/gpu-tests.txt | head -20
sg() { # $1 dist, $2 tag
  timeout 120 node $1/src/cli/main.js bench --driver native --suite same-gpu --out $OUT/r/sg-$2 > $OUT/r/sg-$2.txt 2>&1; echo "sg $2 exit $?"
  node -e 'const d=JSON.parse(require("fs").readFileSync(process.argv[1]));const s=d.series.filter(x=>/same GPU/.test(x.series));const by={};for(const x of s){(by[x.size]??={})[x.series.startsWith("raw")?"raw":"sm"]=x.value}console.log(process.argv[2],Object.entries(by).map(([k,v])=>`${k>>20||k/1024+"K"}${k>>20?"M":""}:${v.sm.toFixed(0)}/${v.raw.toFixed(0)}=${(100*v.sm/v.raw).toFixed(0)}%`).join(" "))' $OUT/r/sg-$2/bench.json $2
}
for i in 1 2; do sg dist-base base$i; sg dist new$i; done
source .gpu/mps.sh start
sg dist-base base-mps; sg dist new-mps
source .gpu/mps.sh stop
for v in dist-base dist; do
  timeout 150 node $v/src/cli/main.js bench --driver native --suite all-to-all --out $OUT/r/a2a-$v > $OUT/r/a2a-$v.txt 2>&1; echo "a2a $v exit $?"
  grep -A1 "all-to-all, 8" $OUT/r/a2a-$v.txt | tail -1
done
