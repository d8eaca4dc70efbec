#!/usr/bin/env bash
# run_fuzz.sh - the long fuzzing run of issue 12 (bench/RESULTS.md): every
# libFuzzer target for SECONDS (default 600), two at a time on this 2-core
# machine, through scripts/fuzz.sh (which asserts each target's invariants).
#   usage: bash bench/run_fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
S=${1:-600}
bash scripts/fuzz.sh 1 > /dev/null # build once (and a 1-second smoke run)
export DH_FUZZ_NO_BUILD=1
bash scripts/fuzz.sh "$S" fuzz_media fuzz_image_header > build/fuzz-a.out 2>&1 &
a=$!
bash scripts/fuzz.sh "$S" fuzz_manifest_line fuzz_spec > build/fuzz-b.out 2>&1 &
b=$!
rc=0
wait $a || rc=1
wait $b || rc=1
cat build/fuzz-a.out build/fuzz-b.out
exit $rc
