#!/usr/bin/env bash
# run_mutants.sh - the long mutation run of issue 12 (bench/RESULTS.md): COUNT
# seeded mutants (default 10,000) of small generated media through `index` and
# a real `run` of the ASan+UBSan build (tests/mutants.sh does the work and the
# checks: no crash, no hang, failures named, delivered + failed = scheduled),
# plus the longest time any single sample held a worker.
#   usage: bash bench/run_mutants.sh [ASAN_BUILD_DIR] [COUNT] [SEED]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build/asan}
COUNT=${2:-10000}
SEED=${3:-7}
[[ -x $B/datahelix && -x $B/tests/dh_mutate ]] ||
    { echo "run_mutants.sh: build $B first (cmake -DDH_SANITIZE=ON)" >&2; exit 1; }
start=$(date +%s)
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    bash tests/mutants.sh "$B/datahelix" "$B/tests/dh_mutate" "$COUNT" "$SEED"
echo "run_mutants: $COUNT mutants in $(( $(date +%s) - start )) s"
