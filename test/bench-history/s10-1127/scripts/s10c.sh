#!/usr/bin/env bash
mkdir -p $OUT/r $OUT/prof
SAME=1 timeout 100 node .dev-main/launch-paths.mjs > $OUT/r/lp-same.txt 2>&1; echo "lp same $?"; cat $OUT/r/lp-same.txt
SAME=0 timeout 100 node .dev-main/launch-paths.mjs > $OUT/r/lp-across.txt 2>&1; echo "lp across $?"; cat $OUT/r/lp-across.txt
timeout 120 node --cpu-prof --cpu-prof-dir=$OUT/prof dist/src/cli/main.js bench --driver native --suite same-gpu --sizes 1M --out $OUT/r/sgp > $OUT/r/sgp.txt 2>&1; echo "sgp $?"
grep -A3 "1–16" $OUT/r/sgp.txt | head -4
for f in $OUT/prof/*.cpuprofile; do echo "== $f"; node .dev-main/prof-top.mjs $f 25; done
