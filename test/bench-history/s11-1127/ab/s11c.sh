#!/usr/bin/env bash
# GPU tests on acd67ec; then same-GPU A/B (MPS on): dist (batches of copies up to 4 MiB), l16/l32 (same-GPU batches up to 16/32 MiB).
mkdir -p $OUT/r
T0=$SECONDS
timeout 240 node_modules/.bin/vitest run test/gpu > $OUT/r/gpu-tests.txt 2>&1; echo "gpu tests exit $? after $((SECONDS - T0)) s"
grep -aE "Tests |Test Files|×|FAIL|skipped\)" $OUT/r/gpu-tests.txt | head -20
sg() { # $1 dist, $2 tag
  timeout 90 node $1/src/cli/main.js bench --driver native --suite same-gpu --sizes 256K,1M,4M,16M --out /tmp/sg-$2 > /tmp/sg-$2.txt 2>&1; echo -n "sg $2 exit $? "
  node -e 'const d=JSON.parse(require("fs").readFileSync(process.argv[1]));const s=d.series.filter(x=>/same GPU/.test(x.series));const by={};for(const x of s){(by[x.size]??={})[x.series.startsWith("raw")?"raw":"sm"]=x.value}console.log(process.argv[2],Object.entries(by).map(([k,v])=>`${k>>20||k/1024+"K"}${k>>20?"M":""}:${v.sm.toFixed(0)}/${v.raw.toFixed(0)}=${(100*v.sm/v.raw).toFixed(0)}%`).join(" "))' /tmp/sg-$2/bench.json $2 | tee -a $OUT/r/sg.txt
}
source .gpu/mps.sh start
for i in 1 2; do sg dist base$i; sg dist-l16 l16-$i; sg dist-l32 l32-$i; done
source .gpu/mps.sh stop
