#!/usr/bin/env bash
# run_scale_sim.sh - SIMULATED: many nodes (8 ranks, 32 workers each, G = 16
# per node) with the network model measured by bench/run_comm.sh (latency and
# bandwidth given here), with lending allowed and with lending made
# prohibitive (1,000 s per transfer), on a uniform workload (kinetics-clips)
# and a bimodal one (omni-mix, 10% of samples 5x their predicted CPU).
#   usage: bash bench/run_scale_sim.sh BUILD_DIR [LAT_US] [GBPS] [STEPS] [NODES...]
set -euo pipefail
B=${1:?usage: run_scale_sim.sh BUILD_DIR [LAT_US] [GBPS] [STEPS] [NODES...]}
LAT=${2:-16}; GBPS=${3:-58}; STEPS=${4:-50}
shift $(( $# < 4 ? $# : 4 ))
NODES=("$@"); [[ ${#NODES[@]} -gt 0 ]] || NODES=(64 256 1024)
OUT=$(mktemp -d "${TMPDIR:-/tmp}/dhscale.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
printf "%-26s %6s %-8s %10s %8s %8s %10s %8s %12s %7s\n" workload nodes lending samples/s miss% \
    "p95 ms" "stall p95" lent "shipped GiB" "wall s"
for wl in "kinetics-clips" "omni-mix --cpu-heavy 0.1:5"; do
    for n in "${NODES[@]}"; do
        for lend in yes no; do
            lat=$LAT; [[ $lend == no ]] && lat=1000000000
            # shellcheck disable=SC2086
            "$B/datahelix" sim --workload $wl --policy helix --nodes "$n" --ranks $((8 * n)) \
                --workers $((32 * n)) --batch $((16 * n)) --steps "$STEPS" \
                --net-latency-us "$lat" --net-gbps "$GBPS" --json "$OUT/r.json" > /dev/null
            awk -v wl="$wl" -v n="$n" -v lend="$lend" '
                function f(k,  m) { if (match($0, "\"" k "\":[-0-9.e+]+")) {
                    m = substr($0, RSTART, RLENGTH); sub(/.*:/, "", m); return m + 0 } return 0 }
                { printf "%-26s %6d %-8s %10.1f %8.2f %8.1f %10.1f %8d %12.2f %7.1f\n", wl, n, lend,
                  f("throughput_sps"), 100 * f("miss_rate"), f("wait_p95_ms"), f("stall_p95_ms"),
                  f("lent"), f("bytes_shipped") / 1073741824, f("wall_s") }' "$OUT/r.json"
        done
    done
done
