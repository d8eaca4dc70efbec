#!/usr/bin/env bash
# run_foundation.sh - the figures of the foundation issue (bench/RESULTS.md):
# manifest load rate and memory on a generated 1,000,000-line manifest, and
# the index rate on a folder of 240 short real videos and images.
#   usage: bench/run_foundation.sh [BUILD_DIR]   (default build/release)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build/release}
M=/tmp/dh-bench-1m.jsonl
[[ -f $M ]] || "$B/bench_manifest" gen "$M" 1000000 1
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "== manifest: $(wc -l < "$M") lines, $(du -m "$M" | cut -f1) MiB"
for i in 1 2 3; do "$B/bench_manifest" load "$M"; done
"$B/bench_manifest" jansson "$M"
echo "== index"
bash bench/bench_index.sh "$B/datahelix"
