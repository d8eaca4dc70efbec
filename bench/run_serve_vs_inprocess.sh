#!/usr/bin/env bash
# run_serve_vs_inprocess.sh - the same workload served to R Python trainer
# processes (examples/train_ddp.py --no-model --emulate: each rank sleeps its
# batch's modelled compute time and meets the others in a gloo all-reduce)
# against the in-process engine with R emulated rank threads (`datahelix
# run`), same manifest, policy, R, W, G and steps (bench/RESULTS.md).
#   usage: [EPOCHS=2] bench/run_serve_vs_inprocess.sh [BUILD_DIR] [REPEATS]   (a few minutes)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build/release}
REPEATS=${2:-3}
DATA=${TMPDIR:-/tmp}/dh-serve-bench
[[ -f $DATA/manifest.jsonl ]] ||
    "$B/datahelix" gen --workload kinetics-clips --out "$DATA" --samples 192 > /dev/null
common=(--manifest "$DATA/manifest.jsonl" --workload kinetics-clips --policy helix
        --ranks 2 --workers 2 --batch 8 --epochs "${EPOCHS:-2}" --cpu-cost-scale 1.1)
echo "| in-process samples/s | served (trainers) | served (agent) | served vs in-process | trainers' CPU (cores) |"
echo "|---|---|---|---|---|"
for k in $(seq "$REPEATS"); do
    "$B/datahelix" run "${common[@]}" --json "$DATA/run.json" > /dev/null
    inproc=$(sed -n 's/.*"throughput_sps":\([0-9.]*\).*/\1/p' "$DATA/run.json")
    sock="@dh-bench-$$-$k"
    "$B/datahelix" serve "${common[@]}" --socket "$sock" --json "$DATA/serve.json" \
        > /dev/null 2>&1 &
    agent=$!
    line=$(DH_PYTHONPATH="$B/python" /usr/bin/python3 examples/train_ddp.py --ranks 2 \
               --epochs "${EPOCHS:-2}" --socket "$sock" --no-model --emulate | tail -n 1)
    served=$(sed -n 's/.*"throughput_sps": \([0-9.]*\).*/\1/p' <<< "$line")
    cpu=$(sed -n 's/.*"trainer_cpu_frac": \([0-9.]*\).*/\1/p' <<< "$line")
    wait $agent
    agent_sps=$(sed -n 's/.*"throughput_sps":\([0-9.]*\).*/\1/p' "$DATA/serve.json")
    awk -v a="$inproc" -v b="$served" -v c="$agent_sps" -v u="$cpu" 'BEGIN {
        printf "| %.1f | %.1f | %.1f | %+.1f%% | %.2f |\n", a, b, c, 100 * (b / a - 1), u }'
done
