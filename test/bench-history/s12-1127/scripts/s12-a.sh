#!/bin/bash
# s12 first call: test/gpu on 103c36e + first-message marks on native
cd "$(dirname "$0")/.."
mkdir -p $OUT/a
for i in 1 2 3 4; do MARKS=1 DEV1=1 node .dev-main/first-msgs.mjs > $OUT/a/marks-$i.txt 2>&1; done
timeout 200 node_modules/.bin/vitest run test/gpu > $OUT/a/gpu-tests.txt 2>&1; echo "rc=$?" >> $OUT/a/gpu-tests.txt
tail -5 $OUT/a/gpu-tests.txt
tail -3 $OUT/a/marks-*.txt
cd $OUT && tar czf a.tgz a && rm -rf a
