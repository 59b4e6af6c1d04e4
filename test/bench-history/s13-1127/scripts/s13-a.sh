#!/bin/bash
cd "$(dirname "$0")/.."
echo "== no MPS"; node .dev-main/samegpu-launch.mjs
echo "== MPS"; source .gpu/mps.sh start; node .dev-main/samegpu-launch.mjs; source .gpu/mps.sh stop
