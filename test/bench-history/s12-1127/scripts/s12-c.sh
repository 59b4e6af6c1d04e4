#!/bin/bash
# s12: the data-path warm-up on 2 GPUs: first-msgs with/without, bench first-send+negotiation, test/gpu
cd "$(dirname "$0")/.."
mkdir -p $OUT/c
for r in 1 2 3 4; do
 for w in 1 0; do WARM=$w DEV1=1 node .dev-main/first-msgs.mjs 2>&1 | tail -1 >> $OUT/c/neg.txt; done
 for w in 1 0; do LAZY=1 WARM=$w DEV1=1 node .dev-main/first-msgs.mjs 2>&1 | tail -1 >> $OUT/c/lazy.txt; done
done
cat $OUT/c/neg.txt $OUT/c/lazy.txt
T0=$SECONDS
node dist/src/cli/main.js bench --driver native --suite first-send,negotiation --json > $OUT/c/fs.json 2> $OUT/c/fs.err; echo "bench rc=$? $((SECONDS-T0)) s"
T0=$SECONDS
timeout 200 node_modules/.bin/vitest run test/gpu > $OUT/c/gpu-tests.txt 2>&1; echo "gpu tests rc=$? after $((SECONDS - T0)) s"
grep -aE "Tests |Test Files|×|FAIL" $OUT/c/gpu-tests.txt | head -12
cd $OUT && tar czf c.tgz c && rm -rf c
