#!/usr/bin/env bash
# run_ddp_loaders.sh - examples/train_ddp.py (2 DDP ranks, gloo, a small video
# model, 15 ms of emulated accelerator time per sample) fed by `datahelix serve`
# and by the PyTorch DataLoader + DistributedSampler decoding with PyAV, on the
# same generated kinetics-like clips, alternately, REPEATS times each: the
# demo's side-by-side comparison with repeats (bench/RESULTS.md).
#   usage: bench/run_ddp_loaders.sh [BUILD_DIR] [REPEATS] [SAMPLES]  (~1 min per pair)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build/release}
REPEATS=${2:-3}
SAMPLES=${3:-96}
PY=/usr/bin/python3
DATA=$(mktemp -d "${TMPDIR:-/tmp}/dh-ddp-bench.XXXXXX")
trap 'rm -rf "$DATA"' EXIT
"$B/datahelix" gen --workload kinetics-clips --out "$DATA" --samples "$SAMPLES" > /dev/null
M=$DATA/manifest.jsonl
row() { # loader, json line
    "$PY" -c 'import json,sys; r=json.loads(sys.argv[2]); print("| %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f%% |" % (
        sys.argv[1], r["steps"], r["throughput_sps"], r["wait_p50_ms"], r["wait_p95_ms"],
        r["wait_p99_ms"], 100 * r["input_wait_frac"]))' "$1" "$2"
}
echo "| loader | steps | samples/s | wait p50 ms | wait p95 ms | wait p99 ms | input wait |"
echo "|---|---|---|---|---|---|---|"
for k in $(seq "$REPEATS"); do
    sock="@dh-ddp-bench-$$-$k"
    "$B/datahelix" serve --manifest "$M" --workload kinetics-clips --ranks 2 --workers 2 \
        --batch 8 --epochs 1 --socket "$sock" > /dev/null 2>&1 &
    agent=$!
    line=$(DH_PYTHONPATH="$B/python" "$PY" examples/train_ddp.py --ranks 2 --epochs 1 --socket "$sock" \
               --emulate-ms-per-sample 15 | tail -n 1)
    wait $agent
    row datahelix "$line"
    line=$(DH_PYTHONPATH="$B/python" "$PY" examples/train_ddp.py --ranks 2 --loader torch \
               --manifest "$M" --workers 2 --batch 8 --epochs 1 --emulate-ms-per-sample 15 |
           tail -n 1)
    row torch "$line"
done
