#!/usr/bin/env bash
mkdir -p $OUT/r
T0=$SECONDS
timeout 240 node_modules/.bin/vitest run test/gpu > $OUT/r/gpu-tests.txt 2>&1; echo "gpu tests exit $? after $((SECONDS - T0)) s"
grep -aE "Tests |Test Files|×|FAIL|skipped\)" $OUT/r/gpu-tests.txt | head -20
for i in 1 2; do
  T0=$SECONDS
  timeout 150 node dist/src/cli/main.js bench --driver native --suite memory-across --out $OUT/r/ma$i > $OUT/r/ma$i.txt 2>&1; echo "ma $i exit $? after $((SECONDS - T0)) s"
  grep -A1 "GPU0→GPU1, \(256 MiB\|1 GiB\)" $OUT/r/ma$i.txt | grep -v "^--" | paste - - | sed 's/  */ /g'
done
