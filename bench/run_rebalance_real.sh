#!/usr/bin/env bash
# run_rebalance_real.sh - issue 5's real-engine figures (bench/RESULTS.md):
# helix against helix-noreb on real media, R=4 W=2 G=16 inside one node,
# with the descriptors right (defaults) and under the GPU-side stress (10% of
# samples truly 3x heavier than described), plus the stress's truthful
# reference (helix-noreb with --understate-told). Each condition runs with
# seeds 1..REPS (sampler order and GPU noise; the media stay the same).
# Prints one line per run and the median throughput per (workload,
# condition, policy).
#   usage: bench/run_rebalance_real.sh [BUILD_DIR] [REPS] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build/release}
REPS=${2:-3}
STEPS=${3:-40}
WL=kinetics-clips,anyres-images,native-res-video
DATA=${DH_BENCH_DATA:-/tmp/dh-bench-real}
OUT=$(mktemp -d "${TMPDIR:-/tmp}/dhreb.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%F)"
run() { # run NAME WORKLOAD POLICIES SEED [EXTRA...]
    local name=$1 wl=$2 pol=$3 seed=$4; shift 4
    "$B/datahelix" bench --mode real --workloads "$wl" --policies "$pol" --steps "$STEPS" \
        --repeats 1 --run-seconds 0 --seed "$seed" --data "$DATA" --json "$OUT/$name.$wl.$seed.json" "$@" \
        > "$OUT/$name.$wl.$seed.out"
}
# The GPU side is scaled to each workload's rho from the measured CPU cost, so
# the runs to be compared share one measurement: the first default run's.
for wl in ${WL//,/ }; do
    for seed in $(seq 1 "$REPS"); do
        if [[ $seed == 1 ]]; then
            run default "$wl" helix-noreb,helix "$seed"
            scale=$(sed -n 's/.*CPU cost on this machine = \([0-9.]*\) x.*/\1/p' \
                "$OUT/default.$wl.1.out")
            echo "$wl: CPU cost scale $scale (measured once, shared by every run)"
        else
            run default "$wl" helix-noreb,helix "$seed" --cpu-cost-scale "$scale"
        fi
        run stress "$wl" helix-noreb,helix "$seed" --understate 0.1:3 --cpu-cost-scale "$scale"
        run told "$wl" helix-noreb "$seed" --understate 0.1:3 --understate-told \
            --cpu-cost-scale "$scale"
    done
done
field() { sed -n "s/.*\"$1\":\"\{0,1\}\([^,\"]*\).*/\1/p"; }
for f in "$OUT"/*.json; do
    cond=$(basename "$f" | cut -d. -f1) seed=$(basename "$f" | cut -d. -f3)
    grep '"engine":"real"' "$f" | while read -r line; do
        printf '%s %s %s %s %s %s %s %s %s %s\n' "$(field workload <<< "$line")" "$seed" \
            "$cond" "$(field policy <<< "$line")" \
            "$(field throughput_sps <<< "$line")" "$(field efficiency <<< "$line")" \
            "$(field placement_s <<< "$line")" "$(field makespan_s <<< "$line")" \
            "$(field reb_moved <<< "$line")" "$(field reb_move_s <<< "$line")"
    done
done | sort -k1,1 -k2,2n -k3,3 -k4,4 > "$OUT/all.txt"
echo "== runs: workload seed condition policy samples/s efficiency placement_s makespan_s moves move_s"
cat "$OUT/all.txt"
echo "== paired by seed: samples/s (default: noreb helix change) (stress: noreb helix reference recovered)"
awk '{v[$1" "$2" "$3" "$4] = $5; k[$1" "$2] = 1}
     END {for (x in k) {
         dn = v[x" default helix-noreb"]; dh = v[x" default helix"];
         sn = v[x" stress helix-noreb"]; sh = v[x" stress helix"]; t = v[x" told helix-noreb"];
         printf "%s  %.1f %.1f %+.1f%%  %.1f %.1f %.1f %s\n", x, dn, dh, 100 * (dh / dn - 1),
             sn, sh, t, (t > sn ? sprintf("%.0f%%", 100 * (sh - sn) / (t - sn)) : "n/a")}}' \
    "$OUT/all.txt" | sort
