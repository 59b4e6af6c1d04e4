#!/usr/bin/env bash
# Copy kernel with its list as a kernel-node parameter: launch costs, then same-GPU and streaming A/B.
# dist-base = 4e0f9af, dist = params (lone copies too), dist-min2 = params (runs of 2+), dist-x = params, cross-GPU batches too.
mkdir -p $OUT/r
SAME=1 timeout 60 node .dev-main/kparams-probe.mjs > $OUT/r/probe-same.jsonl 2>&1; echo "probe same $?"; cat $OUT/r/probe-same.jsonl
SAME=0 timeout 60 node .dev-main/kparams-probe.mjs > $OUT/r/probe-across.jsonl 2>&1; echo "probe across $?"; cat $OUT/r/probe-across.jsonl
sg() { # $1 dist, $2 tag
  timeout 90 node $1/src/cli/main.js bench --driver native --suite same-gpu --sizes 256K,1M,4M,16M --out $OUT/r/sg-$2 > $OUT/r/sg-$2.txt 2>&1; echo -n "sg $2 exit $? "
  node -e 'const d=JSON.parse(require("fs").readFileSync(process.argv[1]));const s=d.series.filter(x=>/same GPU/.test(x.series));const by={};for(const x of s){(by[x.size]??={})[x.series.startsWith("raw")?"raw":"sm"]=x.value}console.log(process.argv[2],Object.entries(by).map(([k,v])=>`${k>>20||k/1024+"K"}${k>>20?"M":""}:${v.sm.toFixed(0)}/${v.raw.toFixed(0)}=${(100*v.sm/v.raw).toFixed(0)}%`).join(" "))' $OUT/r/sg-$2/bench.json $2
}
st() {
  timeout 90 node $1/src/cli/main.js bench --driver native --suite streaming --sizes 1M --out $OUT/r/st-$2 > $OUT/r/st-$2.txt 2>&1; echo -n "st $2 exit $? "
  grep -A1 "streamed, window" $OUT/r/st-$2.txt | tail -1
}
source .gpu/mps.sh start
for i in 1 2; do sg dist-base base$i; sg dist p1-$i; sg dist-min2 p2-$i; done
source .gpu/mps.sh stop
for i in 1 2; do st dist-base base$i; st dist p1-$i; st dist-x x$i; done
