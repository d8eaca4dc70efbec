#!/usr/bin/env bash
# run_nodes.sh - the real engine on 1, 2 and 4 nodes of this one machine (mpirun,
# shared-memory transport), interleaved repeats, against the simulator's
# prediction of the same runs.
#   usage: bash bench/run_nodes.sh BUILD_DIR [STEPS] [REPEATS] [POLICY]
# Workloads: kinetics-clips (uniform clips) and omni-mix (audio, images and long
# videos: bimodal CPU cost), generated small ("mini"), R = 4 emulated ranks, W = 4
# workers in all, G = 16. The machine has 2 cores, so 4 workers run at about half
# a core each whatever the node count: the simulator is given that (CPU cost x
# W / cores). "real" lends CPU and moves rebalanced samples between nodes (helix;
# the gates' network model is the measured wire: 16 us, 58 Gb/s, bench/run_comm.sh);
# "real-nolend" makes the network prohibitive (no loan and no move between nodes
# passes its gate; moves within a node still do). "sim" and "sim+lend" are the
# simulator's predictions of the two (SIMULATED). "xmv" is the moves that crossed
# nodes per run, "MiB mv" their bytes.
set -euo pipefail
B=${1:?usage: run_nodes.sh BUILD_DIR [STEPS] [REPEATS] [POLICY]}
STEPS=${2:-40}; REPEATS=${3:-3}; POL=${4:-helix}
DH="$B/datahelix"
MPIRUN=(mpirun --oversubscribe --mca btl_vader_single_copy_mechanism none)
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
OUT=$(mktemp -d "${TMPDIR:-/tmp}/dhnodes.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
CORES=$(nproc)
field() { # field FILE KEY
    grep -o "\"$2\":[-0-9.e+]*" "$1" | head -n 1 | cut -d: -f2
}
printf "%-15s %5s %-11s %10s %9s %9s %10s %10s %10s %9s %6s %8s %5s %7s\n" workload nodes engine \
    samples/s "range %" "p95 ms" "stall p95" "xchg ms" "ctrl us" "comm CPU%" lent "MiB out" \
    xmv "MiB mv"
for wl in kinetics-clips omni-mix; do
    "$DH" gen --workload $wl --out "$OUT/$wl" --samples 64 > /dev/null 2>&1
    M="$OUT/$wl/manifest.jsonl"
    scale=$("$DH" run --manifest "$M" --workload $wl --ranks 4 --workers 4 --batch 16 --steps 1 \
        --calibrate 16 | sed -n 's/^calibrated: CPU cost on this machine = \([0-9.]*\) x.*/\1/p')
    common=(--manifest "$M" --workload $wl --policy "$POL" --ranks 4 --workers 4 --batch 16
            --steps "$STEPS" --cpu-cost-scale "$scale")
    wire=(--net-latency-us 16 --net-gbps 58)
    nowire=(--net-latency-us 1000000000)
    for rep in $(seq "$REPEATS"); do # interleaved: each repeat runs every configuration in turn
        "$DH" run "${common[@]}" --json "$OUT/r1.$rep.json" > "$OUT/r1.$rep.out"
        for n in 2 4; do
            "${MPIRUN[@]}" -np $n "$DH" run "${common[@]}" "${wire[@]}" \
                --json "$OUT/r$n.$rep.json" > "$OUT/r$n.$rep.out"
            "${MPIRUN[@]}" -np $n "$DH" run "${common[@]}" "${nowire[@]}" \
                --json "$OUT/r${n}x.$rep.json" > "$OUT/r${n}x.$rep.out"
        done
    done
    for cfg in 1 2 2x 4 4x; do
        n=${cfg%x}
        label=real; [[ $cfg == *x ]] && label=real-nolend
        tps=() p95=0 st=0 x=0 ctl=0 comm=0 lent=0 mib=0 xmv=0 xmib=0
        for rep in $(seq "$REPEATS"); do
            j="$OUT/r$cfg.$rep.json"
            lent=$(awk -v a="$lent" -v b="$(field "$j" lent)" 'BEGIN{print a + b}')
            mib=$(awk -v a="$mib" -v b="$(field "$j" bytes_shipped)" 'BEGIN{print a + b / 1048576}')
            xmv=$(awk -v a="$xmv" -v b="$(field "$j" reb_remote)" 'BEGIN{print a + b}')
            xmib=$(awk -v a="$xmib" -v b="$(field "$j" reb_remote_bytes)" 'BEGIN{print a + b / 1048576}')
            tps+=("$(field "$j" throughput_sps)")
            p95=$(awk -v a="$p95" -v b="$(field "$j" wait_p95_ms)" 'BEGIN{print a + b}')
            st=$(awk -v a="$st" -v b="$(field "$j" stall_p95_ms)" 'BEGIN{print a + b}')
            x=$(awk -v a="$x" -v b="$(field "$j" exchange_mean_s)" 'BEGIN{print a + 1e3 * b}')
            ctl=$(awk -v a="$ctl" -v b="$(field "$j" control_mean_s)" 'BEGIN{print a + 1e6 * b}')
            c=$(sed -n "s/.*communication thread: .*, \([0-9.]*\)% of a core/\1/p" "$OUT/r$cfg.$rep.out")
            comm=$(awk -v a="$comm" -v b="${c:-0}" 'BEGIN{print a + b}')
        done
        printf "%s\n" "${tps[@]}" | sort -g | awk -v wl=$wl -v n=$n -v r="$REPEATS" -v p="$p95" \
            -v s="$st" -v x="$x" -v c="$ctl" -v m="$comm" -v lb=$label -v l="$lent" -v mb="$mib" \
            -v xm="$xmv" -v xb="$xmib" '
            { v[NR] = $1 } END { med = v[int((NR + 1) / 2)];
              printf "%-15s %5d %-11s %10.1f %9.1f %9.1f %10.1f %10.3f %10.1f %9.2f %6.1f %8.1f %5.1f %7.1f\n",
                     wl, n, lb, med, 100 * (v[NR] - v[1]) / med, p / r, s / r, x / r, c / r, m / r,
                     l / r, mb / r, xm / r, xb / r }'
        [[ $cfg == *x ]] && continue
        simscale=$(awk -v s="$scale" -v w=4 -v c="$CORES" 'BEGIN{print s * (w > c ? w / c : 1)}')
        for kind in sim sim+lend; do
            net=("${nowire[@]}"); [[ $kind == sim+lend ]] && net=("${wire[@]}")
            "$DH" sim "${common[@]}" --cpu-cost-scale "$simscale" --nodes $n "${net[@]}" \
                --json "$OUT/s.json" > /dev/null
            printf "%-15s %5d %-11s %10.1f %9s %9.1f %10.1f %10s %10s %9s %6d %8.1f %5d %7.1f\n" $wl $n \
                $kind "$(field "$OUT/s.json" throughput_sps)" - "$(field "$OUT/s.json" wait_p95_ms)" \
                "$(field "$OUT/s.json" stall_p95_ms)" - - - "$(field "$OUT/s.json" lent)" \
                "$(awk -v b="$(field "$OUT/s.json" bytes_shipped)" 'BEGIN{print b / 1048576}')" \
                "$(field "$OUT/s.json" reb_remote)" \
                "$(awk -v b="$(field "$OUT/s.json" reb_remote_bytes)" 'BEGIN{print b / 1048576}')"
        done
    done
done
