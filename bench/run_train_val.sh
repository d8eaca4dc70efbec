#!/usr/bin/env bash
# run_train_val.sh - training with and without validation passes beside it: a 2-rank job
# (bench/train_val.py, MS (15) ms of emulated accelerator time per training sample, a third of
# it per validation sample) on generated kinetics-like clips, fed by a training agent
# (W = 2, G = 8, 2 epochs); with one validation pass after each epoch (--no-shuffle
# --keep-last, endless) fed either by a second agent (its own W = 2: "second-agent") or by
# a val stream of the training agent (--stream val: the two streams share the W = 2
# workers: "one-agent"). Alternates the three REPEATS times; prints training samples/s and
# each validation pass's seconds.
#   usage: bench/run_train_val.sh [BUILD_DIR] [REPEATS] [TRAIN_SAMPLES] [VAL_SAMPLES] [MS]
set -euo pipefail
cd "$(dirname "$0")/.."
B=$(cd "${1:-build/release}" && pwd)
REPEATS=${2:-3}
NT=${3:-96}
NV=${4:-36}
MS=${5:-15}
PY=/usr/bin/python3
DATA=$(mktemp -d "${TMPDIR:-/tmp}/dh-tv-bench.XXXXXX")
trap 'kill $(jobs -p) 2> /dev/null; rm -rf "$DATA"' EXIT
"$B/datahelix" gen --workload kinetics-clips --out "$DATA/train" --samples "$NT" > /dev/null
"$B/datahelix" gen --workload kinetics-clips --out "$DATA/val" --samples "$NV" --seed 2 > /dev/null
echo "| config | train samples/s | val pass s (after epoch 0, 1) |"
echo "|---|---|---|"
VAL_OPTS=(--manifest "$DATA/val/manifest.jsonl" --batch 8 --no-shuffle --keep-last)
for k in $(seq "$REPEATS"); do
    for cfg in alone second-agent one-agent; do
        ts="@dh-tv-$$-$k-t" vs="@dh-tv-$$-$k-v"
        streams=()
        [[ $cfg == one-agent ]] && streams=(--stream val "${VAL_OPTS[@]}")
        "$B/datahelix" serve --manifest "$DATA/train/manifest.jsonl" --workload kinetics-clips \
            --ranks 2 --workers 2 --batch 8 --epochs 2 --socket "$ts" "${streams[@]}" \
            > /dev/null 2>&1 &
        agent=$!
        val=- stream=
        if [[ $cfg == second-agent ]]; then
            "$B/datahelix" serve --workload kinetics-clips --ranks 2 --workers 2 --steps 0 \
                "${VAL_OPTS[@]}" --socket "$vs" > /dev/null 2>&1 &
            vagent=$!
            val=$vs
        elif [[ $cfg == one-agent ]]; then
            val=$ts stream=val
        fi
        line=$(PYTHONPATH="$B/python" "$PY" bench/train_val.py "$ts" "$val" 2 "$MS" $stream |
            tail -n 1)
        wait $agent
        [[ $cfg == second-agent ]] && wait $vagent
        "$PY" -c 'import json,sys; r=json.loads(sys.argv[2]); print("| %s | %.1f | %s |" % (
            sys.argv[1], r["train_sps"], ", ".join("%.2f" % s for s in r["val_pass_s"]) or "-"))' \
            "$cfg" "$line"
    done
done
