#!/usr/bin/env bash
# Session 9, call B: (1) the two-shot kernels: committed (dist-old), copy_bytes predicated + two vectors a thread
# in the reduction (dist), copy_bytes only (dist-copy), committed with 256 blocks (dist-256); (2) warm-up in
# batches (dist) against one batch (dist-old); (3) 4 ranks on 2 GPUs with MPS, dist-old against dist; (4) GPU tests.
set -o pipefail
mkdir -p $OUT/r
show='const d=JSON.parse(require("fs").readFileSync(process.argv[1]));console.log(process.argv[1].split("/").pop(), d.figures.map(f=>`${f.bytes}${f.algorithm==="two-shot"&&f.bytes<4e6?"t":""}${f.graph?"g":""}:${f.medianUs}[${f.minUs}-${f.maxUs}]${f.bytes>=1e8?" "+f.busGBs+"GB/s":""}`).join("  "))'
C1='[{"bytes":16777216,"warmup":300},{"bytes":16777216},{"bytes":4194304},{"bytes":268435456},{"bytes":1073741824},{"bytes":1048576,"algorithm":"two-shot"}]'
for i in 1 2; do
  for v in dist-old dist dist-copy dist-256; do
    DIST=$v CASES=$C1 timeout 90 node test/gpu/measure-collectives.mjs 2 > $OUT/r/k-$v-$i.json 2> $OUT/r/k-$v-$i.err; echo "k $v $i $?"; node -e "$show" $OUT/r/k-$v-$i.json
  done
done
C2='[{"bytes":8,"warmup":20000},{"bytes":1024},{"bytes":16384},{"bytes":262144},{"bytes":1048576},{"bytes":8,"graph":true}]'
for i in 1 2; do
  for v in dist-old dist; do
    DIST=$v CASES=$C2 timeout 90 node test/gpu/measure-collectives.mjs 2 > $OUT/r/w-$v-$i.json 2> $OUT/r/w-$v-$i.err; echo "w $v $i $?"; node -e "$show" $OUT/r/w-$v-$i.json
  done
done
source .gpu/mps.sh start
C4='[{"bytes":16777216,"warmup":100},{"bytes":16777216},{"bytes":1048576},{"bytes":268435456}]'
for v in dist-old dist; do
  DIST=$v CASES=$C4 timeout 120 node test/gpu/measure-collectives.mjs 4 > $OUT/r/x4-$v.json 2> $OUT/r/x4-$v.err; echo "x4 $v $?"; node -e "$show" $OUT/r/x4-$v.json
done
source .gpu/mps.sh stop
timeout 240 node_modules/.bin/vitest run test/gpu/collectives.gpu.test.ts test/gpu/gpu-driven.gpu.test.ts > $OUT/r/g.log 2>&1; echo "gpu tests exit $?"; grep -aE "Tests|Test Files|×|FAIL|✓" $OUT/r/g.log | head -24
cd $OUT && tar czf r.tgz r && rm -rf r
