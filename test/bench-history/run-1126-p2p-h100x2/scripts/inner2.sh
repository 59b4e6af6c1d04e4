#!/bin/bash
# Call 2 (tree = this branch at 4e1e32f, since reverted; base as in call 1).
set -u
ln -sfn "$PWD/node_modules" ../base/node_modules
source ../../.gpu/mps.sh start > $OUT/mps.txt 2>&1
for r in 1 2; do for t in base tree; do
  (cd ../$t && timeout 40 node dist/src/cli/main.js bench --driver native --suite first-send --json > $OUT/$t-fs-$r.json 2> $OUT/$t-fs-$r.err)
  echo "$t fs $r rc=$? $(date +%T)" >> $OUT/progress.txt
done; done
source ../../.gpu/mps.sh stop >> $OUT/mps.txt 2>&1
