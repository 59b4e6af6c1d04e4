#!/bin/bash
cd "$(dirname "$0")/.."
for r in 1 2 3; do for w in 1 0; do WARM=$w timeout 60 node .dev-main/pp-ab.mjs 2>&1 | tail -1; done; done
