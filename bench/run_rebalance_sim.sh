#!/usr/bin/env bash
# run_rebalance_sim.sh - issue 5's SIMULATED figures across nodes
# (bench/RESULTS.md): the CPU-side stress with --nodes 4 and G = 16, the
# heavier variants where helix-noreb's p95 wait is measurable, and the
# transfer cost sweep. Prints markdown table rows from each run's --json.
#   usage: bench/run_rebalance_sim.sh [BUILD_DIR]   (about 10 s)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build/release}/datahelix
J=$(mktemp "${TMPDIR:-/tmp}/dhsim.XXXXXX.json")
trap 'rm -f "$J"' EXIT
base=(--nodes 4 --batch 16 --steps 500)
get() { sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p" "$J"; }
run() { # run WORKLOAD POLICY ARGS... -> sets the fields of one result
    local w=$1 p=$2; shift 2
    "$B" sim --workload "$w" --policy "$p" "${base[@]}" "$@" --json "$J" > /dev/null
    sps=$(get throughput_sps) eff=$(get efficiency) miss=$(get miss_rate)
    mean=$(get wait_mean_ms) p95=$(get wait_p95_ms) p99=$(get wait_p99_ms)
    single=$(get wait_single_frac) lent=$(get lent) lgated=$(get lend_gated)
    moved=$(get reb_moved) rgated=$(get reb_gated) shipped=$(get bytes_shipped)
}
pair() { # pair WORKLOAD STRESS...: one row, helix-noreb against helix
    local w=$1; shift
    run "$w" helix-noreb "$@"
    local n=("$sps" "$eff" "$miss" "$mean" "$p95" "$p99" "$single")
    run "$w" helix "$@"
    awk -v w="$w" -v st="$*" -v a="${n[*]}" -v b="$sps $eff $miss $mean $p95 $p99 $single" 'BEGIN {
        split(a, n, " "); split(b, h, " ");
        cut = n[5] > 0 ? sprintf("%.0f%%", 100 * (1 - h[5] / n[5])) : "n/a";
        printf "| %s | %s | %.1f | %.1f | %.3f | %.3f | %.1f / %.1f | %.2f / %.2f | %.1f / %.1f | %s | %.0f / %.0f | %.0f / %.0f |\n",
            w, st, n[1], h[1], n[2], h[2], 100 * n[3], 100 * h[3], n[4], h[4], n[5], h[5], cut,
            n[6], h[6], 100 * n[7], 100 * h[7] }'
}
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%F)"
echo "== CPU-side stress: workload | stress | noreb sps | helix sps | noreb eff | helix eff | miss % | mean wait ms | p95 ms | p95 cut | p99 ms | % of wait single tasks explain"
for w in kinetics-clips webvid-caption native-res-video anyres-images omni-mix; do
    pair "$w" --cpu-sigma 0.6
    pair "$w" --cpu-heavy 0.1:5
done
echo "== heavier variants (p95 measurable)"
pair kinetics-clips --cpu-sigma 0.6 --rho 1.1
pair webvid-caption --cpu-heavy 0.2:5
pair omni-mix --cpu-heavy 0.2:5
echo "== transfer cost sweep (omni-mix --cpu-heavy 0.1:5): network | helix sps | lent (gated) | GPU moves (gated) | MiB shipped"
run omni-mix helix-noreb --cpu-heavy 0.1:5
echo "helix-noreb: $sps samples/s"
for g in 100 10 1 0.1 0.01 0.001; do
    run omni-mix helix --cpu-heavy 0.1:5 --net-gbps "$g"
    awk -v g="$g" -v s="$sps" -v l="$lent" -v lg="$lgated" -v m="$moved" -v mg="$rgated" -v b="$shipped" \
        'BEGIN { printf "| %s Gb/s | %.1f | %d (%d) | %d (%d) | %.1f |\n", g, s, l, lg, m, mg, b / 1048576 }'
done
