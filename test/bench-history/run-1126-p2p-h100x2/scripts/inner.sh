#!/bin/bash
# Call 1. Runs from .dev-p2p/tree after boot.sh (node on PATH, node_modules here);
# ../base is main at 171e4db (this branch's base), built the same way.
set -u
ln -sfn "$PWD/node_modules" ../base/node_modules
nvidia-smi -L > $OUT/gpus.txt 2>&1
source ../../.gpu/mps.sh start > $OUT/mps.txt 2>&1
echo "start $(date +%T)" >> $OUT/progress.txt
for t in base tree; do
  (cd ../$t && timeout 60 node dist/src/cli/main.js bench --driver native --suite first-send --json > $OUT/$t-fs.json 2> $OUT/$t-fs.err)
  echo "$t fs rc=$? $(date +%T)" >> $OUT/progress.txt
done
node ../probe.mjs "$PWD" > $OUT/probe-mps.json 2>&1
for i in 1 2 3 4 5; do
  for t in base tree; do
    (cd ../$t && timeout 40 node dist/src/cli/main.js bench --driver native --suite latency,streaming,same-gpu --sizes 8,1M,4M,16M --json > $OUT/$t-lss-$i.json 2> $OUT/$t-lss-$i.err)
    echo "$t $i rc=$? $(date +%T)" >> $OUT/progress.txt
  done
done
source ../../.gpu/mps.sh stop >> $OUT/mps.txt 2>&1
