#!/usr/bin/env bash
# run_rooms.sh - the several-node engine before and after a restructuring (issue 22's
# rooms): per-step control-plane time (records built and applied, control_mean_s), the
# exchange's wall time per step (exchange_mean_s) and throughput, on 2 and 4 nodes of this
# machine (mpirun), both builds interleaved in every repeat so that drift of the shared
# machine falls on both alike. Prints medians and the range over repeats.
#   usage: bash bench/run_rooms.sh BEFORE_BUILD AFTER_BUILD [STEPS] [REPEATS]
set -euo pipefail
A=${1:?usage: run_rooms.sh BEFORE_BUILD AFTER_BUILD [STEPS] [REPEATS]}
B=${2:?usage: run_rooms.sh BEFORE_BUILD AFTER_BUILD [STEPS] [REPEATS]}
STEPS=${3:-40}; REPEATS=${4:-5}
MPIRUN=(mpirun --oversubscribe --mca btl_vader_single_copy_mechanism none)
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
OUT=$(mktemp -d "${TMPDIR:-/tmp}/dhrooms.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
field() { grep -o "\"$2\":[-0-9.e+]*" "$1" | head -n 1 | cut -d: -f2; }
printf "%-15s %5s %-7s %10s %8s %10s %10s\n" workload nodes build samples/s "range %" "xchg ms" \
    "ctrl us"
for wl in kinetics-clips omni-mix; do
    "$B/datahelix" gen --workload $wl --out "$OUT/$wl" --samples 64 > /dev/null 2>&1
    common=(--manifest "$OUT/$wl/manifest.jsonl" --workload $wl --policy helix --ranks 4
            --workers 4 --batch 16 --steps "$STEPS" --net-latency-us 16 --net-gbps 58)
    for rep in $(seq "$REPEATS"); do
        for n in 2 4; do
            for b in before after; do
                bin=$A; [[ $b == after ]] && bin=$B
                "${MPIRUN[@]}" -np $n "$bin/datahelix" run "${common[@]}" \
                    --json "$OUT/$wl.$n.$b.$rep.json" > /dev/null
            done
        done
    done
    for n in 2 4; do
        for b in before after; do
            col() { # col KEY SCALE -> the repeats' values, sorted
                for rep in $(seq "$REPEATS"); do
                    awk -v v="$(field "$OUT/$wl.$n.$b.$rep.json" "$1")" -v s="$2" \
                        'BEGIN{print v * s}'
                done | sort -g
            }
            mid=$(( (REPEATS + 1) / 2 ))
            t=$(col throughput_sps 1); x=$(col exchange_mean_s 1e3); c=$(col control_mean_s 1e6)
            printf "%-15s %5d %-7s %10.1f %8.1f %10.3f %10.1f\n" $wl $n $b \
                "$(sed -n ${mid}p <<< "$t")" \
                "$(awk -v lo="$(head -n 1 <<< "$t")" -v hi="$(tail -n 1 <<< "$t")" \
                       -v m="$(sed -n ${mid}p <<< "$t")" 'BEGIN{print 100 * (hi - lo) / m}')" \
                "$(sed -n ${mid}p <<< "$x")" "$(sed -n ${mid}p <<< "$c")"
        done
    done
done
