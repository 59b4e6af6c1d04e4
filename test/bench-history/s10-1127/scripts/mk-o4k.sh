#!/usr/bin/env bash
# dist-o4k: the built dist with the one-shot's block at 4 KiB instead of 8 (reduce-kernels.js), for s10-next.sh.
set -e
cd "$(dirname "$0")/.."
rm -rf dist-o4k && cp -r dist dist-o4k && find dist-o4k -name '*.map' -delete && find dist-o4k -name '*.d.ts' -delete
sed -i 's/const ONESHOT_BYTES_PER_BLOCK = 8 \* 1024;/const ONESHOT_BYTES_PER_BLOCK = 4 * 1024;/' dist-o4k/src/collectives/reduce-kernels.js
grep -n "ONESHOT_BYTES_PER_BLOCK =" dist-o4k/src/collectives/reduce-kernels.js
grep -qx '/dist-o4k' .git/info/exclude || echo /dist-o4k >> .git/info/exclude
