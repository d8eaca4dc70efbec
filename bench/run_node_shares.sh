#!/usr/bin/env bash
# run_node_shares.sh - helix on several nodes in the simulator (SIMULATED workload and clock,
# real scheduler), one column per datahelix binary given: efficiency and p95 input wait of
# 8 workloads x 2, 8 and 64 nodes of 8 ranks (PER_NODE) x 4 and 8 samples a rank x 2 seeds (96 runs a
# binary, 4 workers a rank, 60 steps), then each binary's geometric mean of efficiency against
# the first's, its worst and best run against it.
# Written to compare placements of a step over nodes (issue 25, bench/RESULTS.md "Each node
# places its share"): build the earlier revision in a worktree and give both binaries:
#   git worktree add /tmp/old REV && cmake -S /tmp/old -B /tmp/old/b -DCMAKE_BUILD_TYPE=RelWithDebInfo \
#     && cmake --build /tmp/old/b -j2 --target datahelix_cli   (its own libdatahelix: a copied binary would load this tree's)
#   bash bench/run_node_shares.sh /tmp/old/b/datahelix build/release/datahelix
#   usage: [PER_NODE=R] [SIM_ARGS="..."] bash bench/run_node_shares.sh DATAHELIX [DATAHELIX...]
# PER_NODE sets the ranks a node (default 8); SIM_ARGS adds flags to every run, e.g.
# "--net-latency-us 1000000000" for a network no loan or move between nodes pays for.
set -euo pipefail
(($# >= 1)) || { echo "usage: run_node_shares.sh DATAHELIX [DATAHELIX...]" >&2; exit 2; }
for b in "$@"; do
    [[ -x $b ]] || { echo "run_node_shares.sh: $b is not an executable" >&2; exit 2; }
done
OUT=$(mktemp -d "${TMPDIR:-/tmp}/dhshares.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
field() { # field FILE KEY
    grep -o "\"$2\":[-0-9.e+]*" "$1" | head -n 1 | cut -d: -f2
}
printf "%-17s %5s %4s %5s" workload nodes per seed
for ((i = 1; i <= $#; i++)); do printf "  %8s %7s" "eff.$i" "p95ms.$i"; done
printf "\n"
for wl in omni-mix kinetics-clips webvid-caption panda-hires llava-video-sft anyres-images \
    interleaved-docs t2v-diffusion; do
    for nodes in 2 8 64; do
        for per in 4 8; do
            for seed in 1 2; do
                r=$((nodes * ${PER_NODE:-8}))
                printf "%-17s %5d %4d %5d" "$wl" "$nodes" "$per" "$seed"
                i=0
                for b in "$@"; do
                    i=$((i + 1))
                    "$b" sim --workload "$wl" --policy helix --ranks "$r" --workers $((4 * r)) \
                        --batch $((per * r)) --nodes "$nodes" --steps 60 --seed "$seed" \
                        ${SIM_ARGS:-} --json "$OUT/r.json" > /dev/null
                    e=$(field "$OUT/r.json" efficiency)
                    printf "  %8.3f %7.0f" "$e" "$(field "$OUT/r.json" wait_p95_ms)"
                    echo "$e" >> "$OUT/eff.$i"
                done
                printf "\n"
            done
        done
    done
done
for ((i = 2; i <= $#; i++)); do
    paste "$OUT/eff.1" "$OUT/eff.$i" | awk -v i="$i" '
        { r = $2 / $1; s += log(r); n++; if (n == 1 || r < lo) lo = r; if (n == 1 || r > hi) hi = r }
        END { printf "binary %d against binary 1: efficiency geomean x%.3f, worst x%.3f, best x%.3f (%d runs)\n",
              i, exp(s / n), lo, hi, n }'
done
