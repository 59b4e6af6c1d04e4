#!/usr/bin/env bash
# Session 9, call G: small allreduces in one pair of processes, in order, with 20-call and 1000-call warm-ups
# per size: is the spread of 1 KiB and 256 KiB an order effect?
set -o pipefail
mkdir -p $OUT/r
show='const d=JSON.parse(require("fs").readFileSync(process.argv[1]));for (const f of d.figures) console.log(`${f.bytes} w${f.warmup}: ${f.medianUs} [${f.minUs}-${f.maxUs}] runs ${f.perRunUs.join(" ")} enq ${f.enqueueMedianUs}`)'
C='[{"bytes":8,"warmup":20000},{"bytes":1024,"warmup":20},{"bytes":16384,"warmup":20},{"bytes":262144,"warmup":20},{"bytes":1024,"warmup":1000},{"bytes":16384,"warmup":1000},{"bytes":262144,"warmup":1000},{"bytes":1024,"warmup":20},{"bytes":262144,"warmup":20},{"bytes":8,"warmup":20}]'
for i in 1 2; do
  CASES=$C timeout 60 node test/gpu/measure-collectives.mjs 2 > $OUT/r/o$i.json 2> $OUT/r/o$i.err; echo "o$i $?"; node -e "$show" $OUT/r/o$i.json
done
cd $OUT && tar czf r.tgz r && rm -rf r
