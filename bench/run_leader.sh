#!/usr/bin/env bash
# run_leader.sh - one plan on several nodes, two ways (docs/MULTINODE.md, "One plan"):
# every node's replica places every step alike (what the engine does), against node 0
# placing each step and sending it to the others, which admit a step only once its
# placement is there (DH_PLAN_LEADER=1, an experiment). Same setup as run_nodes.sh:
# mpirun on this one machine, R = 4, W = 4, G = 16, helix with the measured wire;
# interleaved repeats, the median and range of each.
#   usage: bash bench/run_leader.sh BUILD_DIR [STEPS] [REPEATS]
set -euo pipefail
B=${1:?usage: run_leader.sh BUILD_DIR [STEPS] [REPEATS]}
STEPS=${2:-40}; REPEATS=${3:-5}
DH="$B/datahelix"
MPIRUN=(mpirun --oversubscribe --mca btl_vader_single_copy_mechanism none)
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
OUT=$(mktemp -d "${TMPDIR:-/tmp}/dhleader.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
field() { grep -o "\"$2\":[-0-9.e+]*" "$1" | head -n 1 | cut -d: -f2; }
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%F)"
printf "%-15s %5s %-9s %10s %8s %8s %10s %12s\n" workload nodes plan samples/s "range %" \
    "p95 ms" "xchg ms" "plan waits"
for wl in kinetics-clips omni-mix; do
    "$DH" gen --workload $wl --out "$OUT/$wl" --samples 64 > /dev/null 2>&1
    M="$OUT/$wl/manifest.jsonl"
    scale=$("$DH" run --manifest "$M" --workload $wl --ranks 4 --workers 4 --batch 16 --steps 1 \
        --calibrate 16 | sed -n 's/^calibrated: CPU cost on this machine = \([0-9.]*\) x.*/\1/p')
    common=(--manifest "$M" --workload $wl --policy helix --ranks 4 --workers 4 --batch 16
            --steps "$STEPS" --cpu-cost-scale "$scale" --net-latency-us 16 --net-gbps 58)
    for rep in $(seq "$REPEATS"); do
        for n in 2 4; do
            for plan in replicas leader; do
                lead=0; [[ $plan == leader ]] && lead=1
                DH_PLAN_LEADER=$lead "${MPIRUN[@]}" -x DH_PLAN_LEADER -np $n "$DH" run \
                    "${common[@]}" --json "$OUT/$n.$plan.$rep.json" \
                    > "$OUT/$n.$plan.$rep.out" 2> "$OUT/$n.$plan.$rep.err"
            done
        done
    done
    for n in 2 4; do
        for plan in replicas leader; do
            tps=() p95=0 x=0 waits=0
            for rep in $(seq "$REPEATS"); do
                j="$OUT/$n.$plan.$rep.json"
                tps+=("$(field "$j" throughput_sps)")
                p95=$(awk -v a="$p95" -v b="$(field "$j" wait_p95_ms)" 'BEGIN{print a + b}')
                x=$(awk -v a="$x" -v b="$(field "$j" exchange_mean_s)" 'BEGIN{print a + 1e3 * b}')
                w=$(sed -n 's/.*leader-planned): \([0-9]*\) steps waited.*/\1/p' "$OUT/$n.$plan.$rep.err" |
                    awk '{ s += $1 } END { print s + 0 }')
                waits=$((waits + w))
            done
            printf "%s\n" "${tps[@]}" | sort -g | awk -v wl=$wl -v n=$n -v pl=$plan -v r="$REPEATS" \
                -v p="$p95" -v x="$x" -v w="$waits" '
                { v[NR] = $1 } END { med = v[int((NR + 1) / 2)];
                  printf "%-15s %5d %-9s %10.1f %8.1f %8.1f %10.2f %12.1f\n", wl, n, pl, med,
                         100 * (v[NR] - v[1]) / med, p / r, x / r, w / r }'
        done
    done
done
echo "plan waits: steps per run (all followers) whose admission waited for node 0's placement"
