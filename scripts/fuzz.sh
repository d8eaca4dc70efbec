#!/usr/bin/env bash
# fuzz.sh - build the libFuzzer targets with Debian's clang (ASan + UBSan) and
# run each for SECONDS on a working copy of its committed corpus (fuzz/corpus/,
# never modified). Each target asserts its invariants (fuzz/*.c); a crash, a
# broken invariant, a leak or an input slower than 10 s fails the script and
# leaves the input in build/fuzz/crashes/. Prints executions, coverage and
# features per target (libFuzzer's final stats). Targets run one a core at once
# (DH_FUZZ_JOBS sets how many).
#   usage: bash scripts/fuzz.sh [SECONDS] [TARGET...]   (default 30 s, every target)
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-30}
shift || true
TARGETS=("$@")
[[ ${#TARGETS[@]} -gt 0 ]] || TARGETS=(fuzz_manifest_line fuzz_spec fuzz_image_header fuzz_media fuzz_tar
    fuzz_node_wire fuzz_serve_wire)
command -v clang > /dev/null || { echo "fuzz.sh: clang is missing (bash scripts/deps.sh)" >&2; exit 1; }

B=build/fuzz
mkdir -p build
if [[ -z ${DH_FUZZ_NO_BUILD:-} ]]; then # set by bench/run_fuzz.sh, which builds once
    CC=clang cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDH_FUZZ=ON -DDH_PYTHON=OFF \
        > "$B.configure.log" 2>&1 || { cat "$B.configure.log"; exit 1; }
    cmake --build "$B" -j "$(nproc 2>/dev/null || echo 2)" --target "${TARGETS[@]}" \
        > "$B.build.log" 2>&1 || { cat "$B.build.log"; exit 1; }
fi

mkdir -p "$B/crashes"
# fuzz_one TARGET: runs one target, leaves its libFuzzer log in $B/TARGET.log and its
# line of the summary (and, when it failed, the log's telling lines) in $B/TARGET.out;
# returns non-zero when it failed.
fuzz_one() {
    local t=$1 corpus=fuzz/corpus/${1#fuzz_} work log=$B/$1.log out=$B/$1.out status=ok
    work=$(mktemp -d "${TMPDIR:-/tmp}/dhfuzz.XXXXXX")
    [[ -d $corpus ]] && cp -r "$corpus"/. "$work"/
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        "$B/fuzz/$t" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
            -max_len=65536 -print_final_stats=1 -artifact_prefix="$B/crashes/$t-" \
            "$work" > "$log" 2>&1 || status=FAILED
    local execs cov ft
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2) || true
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2) || true
    printf '%-20s %s: %s executions in %s s, coverage %s edges, %s features\n' "$t" "$status" \
        "${execs:-?}" "$SECONDS_EACH" "${cov:-?}" "${ft:-?}" > "$out"
    if [[ $status != ok ]]; then
        grep -m 20 -E 'ERROR|invariant|SUMMARY|deadly|timeout|leak' "$log" >> "$out" \
            || tail -n 30 "$log" >> "$out"
    fi
    rm -rf "$work"
    [[ $status == ok ]]
}

# Each target is one process on one core: DH_FUZZ_JOBS of them (default one a core) run at
# once; their summaries are printed in the targets' order.
jobs=${DH_FUZZ_JOBS:-$(nproc 2>/dev/null || echo 2)}
failed=0
running=0
for t in "${TARGETS[@]}"; do
    if ((running >= jobs)); then
        wait -n || failed=1
        running=$((running - 1))
    fi
    fuzz_one "$t" &
    running=$((running + 1))
done
while ((running > 0)); do
    wait -n || failed=1
    running=$((running - 1))
done
for t in "${TARGETS[@]}"; do
    if grep -q ' FAILED: ' "$B/$t.out"; then cat "$B/$t.out" >&2; else cat "$B/$t.out"; fi
done
exit $failed
