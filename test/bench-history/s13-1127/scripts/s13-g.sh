#!/usr/bin/env bash
# CPU placement: the machine's NUMA layout, then 1 MiB streaming and the 8 B half round trip unpinned and pinned to one node
set -o pipefail
lscpu | grep -i "numa\|socket\|core\|model name\|^cpu(s)"
nvidia-smi topo -m 2>&1 | head -8
command -v numactl && numactl --hardware | head -6
show() { node -e 'const d=JSON.parse(require("fs").readFileSync(process.argv[1]));for(const f of d.figures) if (f.target && typeof f.value==="number") console.log("  ",f.name.slice(0,50),"|",+f.value.toFixed(2),f.unit,"| runs",JSON.stringify((f.details?.runsGBs??f.details?.runsUs??[]).map(v=>+v.toFixed(1))),"| base",+f.baseline.toFixed(2))' $1; }
N0=$(lscpu -p=cpu,node | grep -v '^#' | awk -F, '$2==0{print $1}' | paste -sd, -)
N1=$(lscpu -p=cpu,node | grep -v '^#' | awk -F, '$2==1{print $1}' | paste -sd, -)
echo "node0: $N0"; echo "node1: $N1"
for i in 1 2; do for mode in none node0 node1; do
  case $mode in none) pre=();; node0) pre=(taskset -c $N0);; node1) [ -n "$N1" ] || continue; pre=(taskset -c $N1);; esac
  echo "== $mode round $i"
  timeout 100 "${pre[@]}" node dist/src/cli/main.js bench --driver native --suite streaming,latency --sizes 8 --out $OUT/$mode-$i > /dev/null 2>&1; show $OUT/$mode-$i/bench.json
done; done
cd $OUT && tar czf out.tgz none-* node* && rm -rf none-* node0-* node1-*
