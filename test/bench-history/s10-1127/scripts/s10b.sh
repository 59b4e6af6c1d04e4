#!/usr/bin/env bash
# copy kinds (memcpyAsync vs memcpyBatchAsync) same GPU and across; then same-gpu suite with MPS on.
mkdir -p $OUT/r
SAME=1 timeout 120 node .dev-main/copy-kinds.mjs > $OUT/r/ck-same.txt 2>&1; echo "ck same $?"; cat $OUT/r/ck-same.txt
timeout 120 node .dev-main/copy-kinds.mjs > $OUT/r/ck-across.txt 2>&1; echo "ck across $?"; cat $OUT/r/ck-across.txt
source .gpu/mps.sh start
timeout 200 node dist/src/cli/main.js bench --driver native --suite same-gpu --out $OUT/r/sg-mps > $OUT/r/sg-mps.txt 2>&1; echo "sg mps $?"
grep -i "same GPU" $OUT/r/sg-mps.txt | head
source .gpu/mps.sh stop
