#!/usr/bin/env bash
# run_wds.sh - helix reading WebDataset shards in place against the WebDataset way with
# PyTorch (the `wds` contender of bench/torch_contender.py) on the same shards (issue 21):
# 1. every default real workload, runs of about 3 s, REPEATS interleaved repeats;
# 2. LONG_WL again on runs of at least LONG_S seconds (helix's; the contender runs the same
#    steps), so that start-up does not decide the ratio.
# Prints bench's tables; the JSONs stay in OUT.
#   usage: bench/run_wds.sh [BUILD_DIR] [REPEATS] [LONG_S] [LONG_WL] [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
B=$(cd "${1:-build/release}" && pwd)
REPEATS=${2:-3}
LONG_S=${3:-60}
LONG_WL=${4:-webvid-caption}
OUT=${5:-$(mktemp -d "${TMPDIR:-/tmp}/dh-wds-bench.XXXXXX")}
mkdir -p "$OUT"
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "== $(date -u +%F): short runs, every default workload, helix vs wds"
time "$B/datahelix" bench --mode real --format wds --policies helix,wds --repeats "$REPEATS" \
    --data "$OUT/data" --json "$OUT/short.json"
echo "== long runs: $LONG_WL, about $LONG_S s each (helix), helix vs wds"
time "$B/datahelix" bench --mode real --format wds --workloads "$LONG_WL" --policies helix,wds \
    --repeats "$REPEATS" --run-seconds "$LONG_S" --data "$OUT/data" --json "$OUT/long.json"
# time to first batch (fill_wait_ms: step 0's wait) and stall p95 per run, from the JSONs
/usr/bin/python3 - "$OUT/short.json" "$OUT/long.json" <<'PYEOF'
import json, sys
for path in sys.argv[1:]:
    print("==", path)
    print("%-18s %-6s %10s %12s %10s %10s %8s" % ("workload", "policy", "samples/s",
          "1st batch ms", "wait p95", "stall p95", "miss %"))
    for r in json.load(open(path))["runs"]:
        print("%-18s %-6s %10.1f %12.0f %10.1f %10.1f %8.1f" % (
            r["workload"], r["policy"], r["throughput_sps"], r["fill_wait_ms"],
            r["wait_p95_ms"], r["stall_p95_ms"], 100 * r["miss_rate"]))
PYEOF
echo "== results in $OUT"
