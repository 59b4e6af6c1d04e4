#!/usr/bin/env bash
# Next session, first GPU call (nvidia-h200-x2): the full bench on the submitted build (issue 26's last check: every
# allreduce target, now with the 1 s first warm-up; the new 5-run medians of streaming, bidirectional, all-to-all,
# same GPU), then one-shot 256 KiB with 4 KiB blocks (dist-o4k, made by .dev-main/mk-o4k.sh) against 8 KiB (dist).
set -o pipefail
mkdir -p $OUT/bench $OUT/r
T0=$SECONDS
timeout 420 node dist/src/cli/main.js bench --driver native --suite latency,bandwidth,streaming,cache,ipc,same-gpu,negotiation,memory,bidirectional,all-to-all,first-send,memory-across,graph,collectives --out $OUT/bench --progress > $OUT/bench/stdout.txt 2> $OUT/bench/progress.log; echo "bench exit $? after $((SECONDS - T0)) s"
node -e 'const d=JSON.parse(require("fs").readFileSync(process.argv[1]));for(const f of d.figures) console.log(f.name,"|",typeof f.value==="number"?+f.value.toFixed(3):f.value,f.unit,f.stats?`[${+f.stats.min.toFixed(2)}-${+f.stats.max.toFixed(2)}]`:"","| base",typeof f.baseline==="number"?+f.baseline.toFixed(3):f.baseline,"| met",f.met,f.skipped??"")' $OUT/bench/bench.json
C='[{"bytes":8,"warmup":100000},{"bytes":65536},{"bytes":262144},{"bytes":1048576}]'
for i in 1 2; do for v in dist dist-o4k; do
  [ -d $v ] || continue
  DIST=$v CASES=$C timeout 60 node test/gpu/measure-collectives.mjs 2 > $OUT/r/o-$v-$i.json 2> $OUT/r/o-$v-$i.err; echo "o $v $i $?"
  node -e 'const d=JSON.parse(require("fs").readFileSync(process.argv[1]));console.log(process.argv[1].split("/").pop(), d.figures.map(f=>`${f.bytes}:${f.medianUs}[${f.minUs}-${f.maxUs}]`).join("  "))' $OUT/r/o-$v-$i.json
done; done
cd $OUT && tar czf bench.tgz bench r && rm -rf bench r
