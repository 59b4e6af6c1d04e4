#!/usr/bin/env bash
# GPU tests, smcuda bench in full (no MPS), then the same-gpu suite with MPS on, on the build of this commit.
set -o pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/bench $OUT/same-gpu-mps
T0=$SECONDS
timeout 150 vitest run test/gpu > $OUT/gpu-tests.txt 2>&1; echo "gpu tests exit $? after $((SECONDS - T0)) s"; tail -6 $OUT/gpu-tests.txt
T0=$SECONDS
timeout 330 node dist/src/cli/main.js bench --driver native --suite latency,bandwidth,streaming,cache,ipc,same-gpu,negotiation,memory,bidirectional,all-to-all,first-send,memory-across,graph,collectives --out $OUT/bench --progress > $OUT/bench/bench.txt 2> $OUT/bench/progress.log; echo "bench exit $? after $((SECONDS - T0)) s"
tail -2 $OUT/bench/progress.log
node -e 'const d=JSON.parse(require("fs").readFileSync(process.argv[1]));for(const f of d.figures) if (f.target) console.log(f.name,"|",typeof f.value==="number"?+f.value.toFixed(3):f.value,f.unit,"| base",typeof f.baseline==="number"?+f.baseline.toFixed(3):f.baseline,"| ratio",typeof f.ratio==="number"?+f.ratio.toFixed(3):f.ratio,"| met",f.met,f.skipped??"")' $OUT/bench/bench.json
source .gpu/mps.sh start
timeout 90 node dist/src/cli/main.js bench --driver native --suite same-gpu --out $OUT/same-gpu-mps > $OUT/same-gpu-mps/bench.txt 2>&1; echo "same-gpu mps exit $?"
grep -A1 "same GPU" $OUT/same-gpu-mps/bench.txt | grep -v "^--" | head -6
source .gpu/mps.sh stop
cd $OUT && tar czf out.tgz bench same-gpu-mps gpu-tests.txt && rm -rf bench same-gpu-mps gpu-tests.txt
