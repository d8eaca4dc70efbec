#!/usr/bin/env bash
# run_fuzz.sh - the long fuzzing run of issue 12 (bench/RESULTS.md): every
# libFuzzer target for SECONDS (default 600), one a core at once (two on this
# 2-core machine), through scripts/fuzz.sh (which asserts each target's
# invariants).
#   usage: bash bench/run_fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
exec bash scripts/fuzz.sh "${1:-600}"
