#!/usr/bin/env bash
# fuzz.sh - build the libFuzzer targets with Debian's clang (ASan + UBSan) and
# run each for SECONDS on a working copy of its committed corpus (fuzz/corpus/,
# never modified). Each target asserts its invariants (fuzz/*.c); a crash, a
# broken invariant, a leak or an input slower than 10 s fails the script and
# leaves the input in build/fuzz/crashes/. Prints executions, coverage and
# features per target (libFuzzer's final stats).
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
failed=0
for t in "${TARGETS[@]}"; do
    corpus=fuzz/corpus/${t#fuzz_}
    work=$(mktemp -d "${TMPDIR:-/tmp}/dhfuzz.XXXXXX")
    [[ -d $corpus ]] && cp -r "$corpus"/. "$work"/
    log=$B/$t.log
    if ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        "$B/fuzz/$t" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
            -max_len=65536 -print_final_stats=1 -artifact_prefix="$B/crashes/$t-" \
            "$work" > "$log" 2>&1; then
        status=ok
    else
        status=FAILED
        failed=1
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
    ft=$(grep -o 'ft: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
    printf '%-20s %s: %s executions in %s s, coverage %s edges, %s features\n' "$t" "$status" \
        "${execs:-?}" "$SECONDS_EACH" "${cov:-?}" "${ft:-?}"
    if [[ $status != ok ]]; then
        grep -m 20 -E 'ERROR|invariant|SUMMARY|deadly|timeout|leak' "$log" >&2 || tail -n 30 "$log" >&2
    fi
    rm -rf "$work"
done
exit $failed
