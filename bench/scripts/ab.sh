#!/usr/bin/env bash
# A/B of builds: runs pingpong.mjs (8 B half round trip) and stream.mjs (1 MiB streamed, W=8,
# REPS windows) for each build in turn, ROUNDS times, the builds interleaved, in one call;
# everything goes to the terminal and to ${OUT:-.}/ab.txt.
#
# Why interleaved: GPU machines differ (the same build measured up to 1.5x
# apart from one machine to another, and streaming drifts within one over minutes). Figures are
# compared only within one call of this script, build against build, round by round; never
# against a figure from another call.
#
#   bash bench/scripts/ab.sh [BUILD...]
#
# BUILD: a directory holding a compiled dist, i.e. with src/index.js (default: dist), or a
# checkout holding one in dist/ (e.g. a second worktree at the previous commit). Relative paths
# are taken from the current directory. Environment: ROUNDS (default 3), N messages per window
# and round trips (default 20000), W (default 8), REPS windows (default 3), PP_SIZE (default 8),
# STREAM_SIZE (default 1048576), TIMEOUT seconds a run (default 60), OUT (default .), SMCUDA_ADDON
# (default this repository's build/Release/smcuda.node; one addon for all builds). Others the
# two scripts read (DRV, WARM, MARK, PROF, OPTS, ...) pass through to both.
#
# Example (GPU machine, repository root; prev/dist a copy of the previous commit's dist):
#   bash bench/scripts/ab.sh dist prev/dist
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
export SMCUDA_ADDON=${SMCUDA_ADDON:-$root/build/Release/smcuda.node}
[ $# -gt 0 ] || set -- dist
builds=() names=("$@")
for b in "$@"; do
  d=$(cd "$b" 2>/dev/null && pwd) || { echo "ab.sh: no directory $b" >&2; exit 2; }
  [ -f "$d/src/index.js" ] || { [ -f "$d/dist/src/index.js" ] && d=$d/dist; }
  [ -f "$d/src/index.js" ] || { echo "ab.sh: $b holds no src/index.js nor dist/src/index.js" >&2; exit 2; }
  builds+=("$d")
done
ROUNDS=${ROUNDS:-3} N=${N:-20000} W=${W:-8} REPS=${REPS:-3} T=${TIMEOUT:-60}
out=${OUT:-.}/ab.txt
for i in $(seq "$ROUNDS"); do
  echo "== round $i"
  for k in "${!builds[@]}"; do
    D=${builds[$k]} name=${names[$k]}
    echo "$name pp: $(DIST=$D SIZE=${PP_SIZE:-8} N=$N timeout "$T" node "$here/pingpong.mjs" 2>&1 | grep 'half RT' | sed 's/.*half RT/half RT/')"
    DIST=$D LABEL=$name SIZE=${STREAM_SIZE:-1048576} W=$W N=$N REPS=$REPS timeout "$T" node "$here/stream.mjs" 2>&1
  done
done 2>&1 | tee "$out"
