#!/usr/bin/env bash
# run_brain_scale.sh - the scheduler's cost and quality from 8 to 16,384 ranks, in one command
# (issue 25's curve). SIMULATED workload and clock, real scheduler and simulator code:
#   1. helix on omni-mix, 8 samples and 4 workers per rank, one node, at each rank count:
#      wall time per simulated sample (all of it, and the event loop alone: wall_s - setup_s,
#      where setup is generating the workload's descriptors and their costs), efficiency, the
#      same against the ordered bound (with the fill and the drain), the first step's fill and
#      the mean step stall, peak RSS. Once at STEPS (default 30) and
#      once at LONG_STEPS (default 200) over a dataset of 16 global batches, so that the
#      run's fill and drain (a fixed cost of any run) weigh as they do in a real job;
#   2. the planner alone (bench_plan): 32,768 samples over 4,096 ranks;
#   3. one agent's control plane with 1,024 nodes x 8 ranks and a 32,768-sample global batch
#      (bench_control: node 0's replica, the other nodes' records applied, moves agreed), over
#      400 steps: the mean of them all, and past the first 100 (the tables' first touches out).
#   REPEATS=N (default 1) runs each simulation N times and prints the fastest: the simulated
#   figures are the same every time, the machine's time is not (shared machines vary by
#   tens of percent from minute to minute).
#   usage: [REPEATS=N] bash bench/run_brain_scale.sh BUILD_DIR [STEPS] [LONG_STEPS] [RANKS...]
set -euo pipefail
B=${1:?usage: [REPEATS=N] run_brain_scale.sh BUILD_DIR [STEPS] [LONG_STEPS] [RANKS...]}
REPEATS=${REPEATS:-1}
[[ $REPEATS =~ ^[1-9][0-9]*$ ]] || { echo "run_brain_scale.sh: REPEATS must be a whole number >= 1, not \"$REPEATS\"" >&2; exit 2; }
STEPS=${2:-30}; LONG=${3:-200}
shift $(( $# < 3 ? $# : 3 ))
RANKS=("$@"); [[ ${#RANKS[@]} -gt 0 ]] || RANKS=(8 64 512 4096 16384)
for x in datahelix bench_plan bench_control; do
    [[ -x $B/$x ]] || { echo "run_brain_scale.sh: $B/$x is missing (build the release tree)" >&2; exit 2; }
done
OUT=$(mktemp -d "${TMPDIR:-/tmp}/dhbrain.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
printf "%7s %6s %12s %12s %10s %8s %8s %9s %9s\n" ranks steps "us/sample" "loop us/smp" efficiency \
    "ordered" "fill ms" "stall ms" "RSS MiB"
for steps in "$STEPS" "$LONG"; do
    for r in "${RANKS[@]}"; do
        extra=()
        [[ $steps == "$LONG" ]] && extra=(--workload-samples $((16 * 8 * r)))
        best=
        for ((k = 0; k < REPEATS; k++)); do
            /usr/bin/time -f "%M" -o "$OUT/rss" "$B/datahelix" sim --workload omni-mix --policy helix \
                --ranks "$r" --workers $((4 * r)) --batch $((8 * r)) --steps "$steps" "${extra[@]}" \
                --json "$OUT/try.json" > /dev/null
            wall=$(grep -o '"wall_s":[-0-9.e+]*' "$OUT/try.json" | cut -d: -f2)
            if [[ -z $best ]] || awk -v a="$wall" -v b="$best" 'BEGIN { exit !(a < b) }'; then
                best=$wall
                mv "$OUT/try.json" "$OUT/r.json"
                mv "$OUT/rss" "$OUT/rss.best"
            fi
        done
        mv "$OUT/rss.best" "$OUT/rss"
        awk -v r="$r" -v st="$steps" -v rss="$(cat "$OUT/rss")" '
            function f(k,  m) { if (match($0, "\"" k "\":[-0-9.e+]+")) {
                m = substr($0, RSTART, RLENGTH); sub(/.*:/, "", m); return m + 0 } return 0 }
            { n = f("samples"); printf "%7d %6d %12.2f %12.2f %10.3f %8.3f %8.1f %9.2f %9.0f\n", r,
              st, 1e6 * f("wall_s") / n, 1e6 * (f("wall_s") - f("setup_s")) / n, f("efficiency"),
              f("efficiency_ordered"), f("fill_wait_ms"), f("stall_mean_ms"), rss / 1024 }' "$OUT/r.json"
    done
done
echo
"$B/bench_plan" 32768 4096 20
"$B/bench_control" 1024 8 32768 400
