#!/bin/bash
cd "$(dirname "$0")/.."
mkdir -p $OUT/b
for r in 1 2 3 4; do
 for v in 0 1 2; do V=$v DEV1=1 node .dev-main/first-msgs.mjs 2>&1 | tail -1 >> $OUT/b/neg.txt; done
 for v in 0 1; do LAZY=1 V=$v DEV1=1 node .dev-main/first-msgs.mjs 2>&1 | tail -1 >> $OUT/b/lazy.txt; done
done
cat $OUT/b/*.txt
