#!/usr/bin/env bash
# run_streaming.sh - peak RSS of simulated runs of 10^3, 10^5 and 10^6 steps
# (bench/RESULTS.md): with state sized by the window of steps in flight, a
# run's memory must not grow with its length. SIMULATED runs; the dataset is
# the workload's first 1,000 global batches, gone round epoch after epoch.
#   usage: bench/run_streaming.sh [BUILD_DIR] [WORKLOAD] [POLICY]   (a few minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build/release}/datahelix
w=${2:-t2v-diffusion}
p=${3:-helix}
echo "| steps | peak RSS (MiB) | wall (s) | throughput (samples/s, simulated) |"
echo "|---|---|---|---|"
for steps in 1000 100000 1000000; do
    out=$( { /usr/bin/time -f "TIME %M %e" "$B" sim --workload "$w" --policy "$p" \
             --steps "$steps" > /tmp/dhstream.$$; } 2>&1 )
    rss=$(echo "$out" | sed -n 's/^TIME \([0-9]*\) .*/\1/p')
    wall=$(echo "$out" | sed -n 's/^TIME [0-9]* \(.*\)/\1/p')
    sps=$(sed -n 's/.*throughput \([0-9.]*\) samples.*/\1/p' /tmp/dhstream.$$)
    awk -v s="$steps" -v r="$rss" -v t="$wall" -v x="$sps" \
        'BEGIN { printf "| %d | %.1f | %s | %s |\n", s, r / 1024, t, x }'
done
rm -f /tmp/dhstream.$$
