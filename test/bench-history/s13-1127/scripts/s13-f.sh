#!/usr/bin/env bash
# 1 MiB streaming, window 8, GPU0 -> GPU1: cross-GPU batch cap 1, 2, 4 (main), 8 MiB, interleaved, two rounds
set -o pipefail
tar -xJf .dev-main/variants.txz
show() { node -e 'const d=JSON.parse(require("fs").readFileSync(process.argv[1]));for(const f of d.figures) if (f.target && typeof f.value==="number") console.log("  ",f.name.slice(0,50),"|",+f.value.toFixed(2),f.unit,"| runs",JSON.stringify((f.details?.runsGBs??[]).map(v=>+v.toFixed(1))),"| base",+f.baseline.toFixed(1))' $1; }
for i in 1 2; do for v in dist dist-b1 dist-b2 dist-b8; do
  echo "== $v round $i"
  timeout 100 node $v/src/cli/main.js bench --driver native --suite streaming --out $OUT/$v-$i > /dev/null 2>&1; show $OUT/$v-$i/bench.json
done; done
cd $OUT && tar czf out.tgz dist* && rm -rf dist*
