#!/usr/bin/env bash
# same-gpu suite without and with MPS (raw over one pair and over the window's slices), on this build
set -o pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p $OUT/same-gpu $OUT/same-gpu-mps
show() { node -e 'const d=JSON.parse(require("fs").readFileSync(process.argv[1]));for(const f of d.figures) if(f.suite==="same-gpu") console.log(f.name,"|",+f.value.toFixed(1),"| raw",+f.baseline.toFixed(1),"| ratio",+f.ratio.toFixed(3),"|",JSON.stringify(f.details.ratioBySize??""),JSON.stringify(f.details.ratioToRawOverSlicesBySize??""))' $1; }
timeout 150 node dist/src/cli/main.js bench --driver native --suite same-gpu --out $OUT/same-gpu > $OUT/same-gpu/bench.txt 2>&1; echo "same-gpu exit $?"; show $OUT/same-gpu/bench.json
source .gpu/mps.sh start
timeout 150 node dist/src/cli/main.js bench --driver native --suite same-gpu --out $OUT/same-gpu-mps > $OUT/same-gpu-mps/bench.txt 2>&1; echo "same-gpu mps exit $?"; show $OUT/same-gpu-mps/bench.json
source .gpu/mps.sh stop
cd $OUT && tar czf out.tgz same-gpu same-gpu-mps && rm -rf same-gpu same-gpu-mps
