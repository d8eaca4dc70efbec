#!/usr/bin/env bash
# count_control.sh - the instructions one agent's control plane runs a step (bench_control's
# timed parts alone, counted by valgrind's callgrind), for each bench_control binary given.
# The 2-core VM's timings move by a fifth within the hour, so a change of 5-10% in
# bench_control's milliseconds cannot be told from noise; an instruction count does not move
# (it misses what memory costs: report the timings too). Each binary runs twice, STEPS_A and
# STEPS_B steps; the difference over STEPS_B - STEPS_A is a steady step (the window's first
# steps, its growth and the first epoch's shuffle cancel out). About a minute a binary.
# To compare with an earlier revision, build its bench_control in a worktree:
#   git worktree add --detach /tmp/old REV && cmake -S /tmp/old -B /tmp/old/b \
#     -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDH_BUILD_TESTS=OFF \
#     && cmake --build /tmp/old/b -j2 --target bench_control
#   bash bench/count_control.sh /tmp/old/b/bench_control build/release/bench_control
# A bench_control built without valgrind's header (valgrind/callgrind.h) counts nothing: the
# script says so. SAMPLES sets the dataset (bench_control's default: 8 global batches; under
# valgrind a large one takes minutes to generate).
# usage: [ARGS="NODES RPN G"] [WORKLOAD=omni-mix] [SAMPLES=N] [STEPS_A=12] [STEPS_B=44]
#   bash bench/count_control.sh BENCH_CONTROL [BENCH_CONTROL...]
set -euo pipefail
(($# >= 1)) || { echo "usage: count_control.sh BENCH_CONTROL [BENCH_CONTROL...]" >&2; exit 2; }
command -v valgrind > /dev/null || {
    echo "count_control.sh: valgrind is not installed (apt-get install valgrind)" >&2
    exit 2
}
read -r -a args <<< "${ARGS:-1024 8 32768}"
wl=${WORKLOAD:-omni-mix} a=${STEPS_A:-12} b=${STEPS_B:-44}
((b > a && a >= 2)) || { echo "count_control.sh: need STEPS_B > STEPS_A >= 2" >&2; exit 2; }
OUT=$(mktemp -d "${TMPDIR:-/tmp}/dhcount.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
count() { # count BINARY STEPS: the instructions callgrind collected
    valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file="$OUT/cg.out" \
        "$1" "${args[@]}" "$2" "$wl" ${SAMPLES:+"$SAMPLES"} > "$OUT/stdout" 2> "$OUT/stderr" || {
        echo "count_control.sh: $1 failed:" >&2
        tail -n 5 "$OUT/stderr" >&2
        exit 1
    }
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$OUT/stderr"
}
echo "instructions a step of one agent's control plane (${args[*]} $wl; steps $a and $b)"
for bin in "$@"; do
    [[ -x $bin ]] || { echo "count_control.sh: $bin is not an executable" >&2; exit 2; }
    ia=$(count "$bin" "$a")
    ib=$(count "$bin" "$b")
    if [[ -z $ia || -z $ib || $ib -eq 0 ]]; then
        echo "$bin: nothing counted (built without valgrind/callgrind.h?)"
        continue
    fi
    moves=$(sed -n 's/.*agreed plans: \([0-9]*\) moves considered.*/\1/p' "$OUT/stdout")
    awk -v bin="$bin" -v ia="$ia" -v ib="$ib" -v n=$((b - a)) -v b="$b" -v moves="$moves" \
        'BEGIN { printf "%s: %.3f M instructions a step (%d steps: %d moves considered)\n",
                 bin, (ib - ia) / n / 1e6, b, moves }'
done
