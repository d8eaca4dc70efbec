#!/usr/bin/env bash
# check_sim_identity.sh - a refactoring must not change a simulated result.
# Builds revision REV (default: the last commit before the current change
# series, given as an argument) in a temporary worktree, runs the simulated
# suite with every policy on both builds and compares the JSON run by run,
# every key except wall_s (the simulator's own time) and the step-stall keys added
# after 8bce929 (stall_*, late_step_frac: new metrics, not changed ones). Exits non-zero and
# prints the differing fields when anything differs.
#   usage: bench/check_sim_identity.sh REV [BUILD_DIR] [STEPS]
#   e.g.   bench/check_sim_identity.sh 437e74c build/release 1000   (about 1 min; 0cbb0f8
#          moved every run's memory budget and pool's admissions on purpose, 437e74c
#          helix's order within a step (fewest ranks waiting): issue 11)
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: bench/check_sim_identity.sh REV [BUILD_DIR] [STEPS]}
build=${2:-build/release}
steps=${3:-1000}
policies=local,pool,helix,helix-nobalance,helix-fifo,helix-noreb
tmp=$(mktemp -d "${TMPDIR:-/tmp}/dhident.XXXXXX")
trap 'git worktree remove --force "$tmp/src" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT

git worktree add --detach "$tmp/src" "$rev" >/dev/null 2>&1
cmake -S "$tmp/src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDH_BUILD_TESTS=OFF \
    > "$tmp/configure.log" 2>&1 || { cat "$tmp/configure.log"; exit 1; }
cmake --build "$tmp/build" -j "$(nproc 2>/dev/null || echo 2)" --target datahelix_cli \
    > "$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }

for side in before after; do
    bin=$([[ $side == before ]] && echo "$tmp/build/datahelix" || echo "$build/datahelix")
    "$bin" bench --mode sim --steps "$steps" --policies "$policies" --json "$tmp/$side.json" \
        > /dev/null
done

# One run per line, wall_s dropped, keys in the order written.
norm() { tr -d '\n' < "$1" | sed 's/},{/}\n{/g; s/^{"runs":\[//; s/\],"summary".*//' |
         sed 's/"wall_s":[^,}]*,\{0,1\}//; s/,"stall_mean_ms":[^}]*}/}/g'; }
if diff <(norm "$tmp/before.json") <(norm "$tmp/after.json") > "$tmp/diff.txt"; then
    runs=$(norm "$tmp/after.json" | grep -c '"policy"')
    echo "identical: $runs simulated runs ($steps steps, $policies) match $rev except wall_s"
else
    echo "DIFFERENT from $rev:"
    cat "$tmp/diff.txt" | tr ',' '\n' | sort | uniq -u | head -40
    # The effect, run by run: where an algorithm changed on purpose, this is what to show.
    paste -d '\t' <(norm "$tmp/before.json") <(norm "$tmp/after.json") | awk -F '\t' '
        function f(s, k,  m) { if (match(s, "\"" k "\":[^,}]*")) { m = substr(s, RSTART, RLENGTH)
            sub(/^[^:]*:/, "", m); gsub(/"/, "", m); return m } return "" }
        $1 != $2 { n++; printf "%-20s %-16s efficiency %s -> %s  miss %s -> %s  wait p95 ms %s -> %s\n",
            f($1, "workload"), f($1, "policy"), f($1, "efficiency"), f($2, "efficiency"),
            f($1, "miss_rate"), f($2, "miss_rate"), f($1, "wait_p95_ms"), f($2, "wait_p95_ms") }
        END { printf "%d of %d runs differ\n", n, NR }'
    exit 1
fi
