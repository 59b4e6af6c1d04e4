#!/bin/bash
# same-GPU batch caps: base (16 MiB batches, copies <= 4 MiB join) vs v32 (32 MiB, <= 16 MiB join) vs v64 (64 MiB, <= 32 MiB join)
cd "$(dirname "$0")/.."
mkdir -p $OUT/f
summ() { node -e 'const d=JSON.parse(require("fs").readFileSync(process.argv[1]));for(const f of d.figures) if(f.name.includes("same GPU")&&f.details.ratioBySize) console.log(process.argv[2], JSON.stringify(Object.fromEntries(Object.entries(f.details.ratioBySize).map(([k,v])=>[k,+v.toFixed(3)]))), JSON.stringify(Object.fromEntries(Object.entries(f.details.runsBySize).map(([k,v])=>[k,[...v.runsGBs].sort((a,b)=>a-b)[2].toFixed(0)+"/"+[...v.rawRunsGBs].sort((a,b)=>a-b)[2].toFixed(0)]))))' $1 $2; }
for mode in nomps mps; do
  [ $mode = mps ] && source .gpu/mps.sh start
  RS="1"; [ $mode = mps ] && RS="1 2"
  for r in $RS; do for v in base v32 v64; do
    D=dist; [ $v != base ] && D=dist-$v
    timeout 100 node $D/src/cli/main.js bench --driver native --suite same-gpu --json > $OUT/f/$mode-$v-$r.json 2>/dev/null
    summ $OUT/f/$mode-$v-$r.json "$mode $v $r"
  done; done
  [ $mode = mps ] && source .gpu/mps.sh stop
done
cd $OUT && tar czf f.tgz f && rm -rf f
