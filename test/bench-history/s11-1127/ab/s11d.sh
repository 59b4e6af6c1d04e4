#!/usr/bin/env bash
# Batch sizes (copies per flush, per process) in streaming 1 MiB across GPUs and same GPU 4 MiB (MPS); streaming profile.
timeout 90 node dist-cnt/src/cli/main.js bench --driver native --suite streaming --sizes 1M > /tmp/st.txt 2>&1; echo "st exit $?"
grep -A1 "streamed, window" /tmp/st.txt | tail -1; grep HIST /tmp/st.txt | cut -c1-600
source .gpu/mps.sh start
timeout 90 node dist-cnt/src/cli/main.js bench --driver native --suite same-gpu --sizes 4M > /tmp/sg.txt 2>&1; echo "sg exit $?"
grep -A1 "1–16 MiB" /tmp/sg.txt | tail -1; grep HIST /tmp/sg.txt | cut -c1-600
source .gpu/mps.sh stop
rm -rf /tmp/prof; mkdir -p /tmp/prof
timeout 120 node --cpu-prof --cpu-prof-dir=/tmp/prof dist/src/cli/main.js bench --driver native --suite streaming --sizes 1M > /tmp/st2.txt 2>&1; echo "prof exit $?"
grep -A1 "streamed, window" /tmp/st2.txt | tail -1
for f in $(ls -S /tmp/prof/*.cpuprofile | head -2); do node dist/src/cli/main.js bench --profile-summary $f 2>&1 | head -32; done
