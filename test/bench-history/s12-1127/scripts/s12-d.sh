#!/bin/bash
cd "$(dirname "$0")/.."
for i in 1 2; do node .dev-main/stream-ready.mjs 2>&1 | tail -1; done
