#!/usr/bin/env bash
# Session 9, call C: the two-shot's block ranges: copy_bytes predicated with 264 blocks (dist-copy), the same with
# 256 blocks (dist-c256), with 264 blocks and ranges rounded to 128 bytes (dist-a128), committed (dist-old);
# then the one-shot's small sizes, committed against copy_bytes predicated (10 runs each).
set -o pipefail
mkdir -p $OUT/r
show='const d=JSON.parse(require("fs").readFileSync(process.argv[1]));console.log(process.argv[1].split("/").pop(), d.figures.map(f=>`${f.bytes}${f.algorithm==="two-shot"&&f.bytes<4e6?"t":""}${f.graph?"g":""}:${f.medianUs}[${f.minUs}-${f.maxUs}]${f.bytes>=1e8?" "+f.busGBs+"GB/s":""}`).join("  "))'
C1='[{"bytes":16777216,"warmup":300},{"bytes":16777216},{"bytes":4194304},{"bytes":268435456},{"bytes":1073741824},{"bytes":1048576,"algorithm":"two-shot"}]'
for i in 1 2; do
  for v in dist-old dist-copy dist-c256 dist-a128; do
    DIST=$v CASES=$C1 timeout 90 node test/gpu/measure-collectives.mjs 2 > $OUT/r/k-$v-$i.json 2> $OUT/r/k-$v-$i.err; echo "k $v $i $?"; node -e "$show" $OUT/r/k-$v-$i.json
  done
done
C2='[{"bytes":8,"warmup":5000},{"bytes":1024},{"bytes":16384},{"bytes":262144},{"bytes":1048576}]'
for i in 1 2; do
  for v in dist-old dist-copy; do
    RUNS=10 DIST=$v CASES=$C2 timeout 90 node test/gpu/measure-collectives.mjs 2 > $OUT/r/w-$v-$i.json 2> $OUT/r/w-$v-$i.err; echo "w $v $i $?"; node -e "$show" $OUT/r/w-$v-$i.json
  done
done
cd $OUT && tar czf r.tgz r && rm -rf r
