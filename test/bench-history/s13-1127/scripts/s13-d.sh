#!/usr/bin/env bash
# same GPU (MPS on) and GPU0->GPU1: streaming default vs ready:true, alternating, 5 runs each
cd "$(dirname "$0")/.."
source .gpu/mps.sh start
for sz in 1048576 4194304 16777216; do SIZE=$sz DEV1=0 N=3000 node .dev-main/stream-ready.mjs 2>&1 | tail -2; done
source .gpu/mps.sh stop
SIZE=1048576 DEV1=1 N=3000 node .dev-main/stream-ready.mjs 2>&1 | tail -2
