#!/usr/bin/env bash
# 1 MiB streaming GPU0 -> GPU1 (stream-ready.mjs, default sends): receiver and sender pinned to given vCPUs (all threads), against unpinned
for i in 1 2; do for pin in "" 0-3/4-7 0-3/28-31 16-19/20-23 0-7/0-7; do
  echo "== pin '${pin}' round $i"
  PIN=$pin SIZE=1048576 DEV1=1 N=4000 RUNS=3 timeout 60 node .dev-main/stream-ready.mjs 2>&1 | tail -1 | cut -c1-110
done; done
