#!/usr/bin/env bash
# test.sh - the whole test suite, as CI runs it: installs missing packages,
# then builds and runs every test in three configurations:
#   build/release  optimised, -Werror
#   build/asan     AddressSanitizer + UndefinedBehaviorSanitizer, -fno-sanitize-recover
#                  (all but e2e_torch: its time goes to the Python contenders' processes)
#   build/tsan     ThreadSanitizer, on the threaded parts (index, engine, agent, setup)
#   build/fuzz     every libFuzzer target for 15 s on its committed corpus (clang)
# Tests of a configuration run one a core at once, plus those that mostly wait (agents and
# trainers on each other's timeouts) beside them: tests/CMakeLists.txt gives each test that
# keeps a core busy one slot of `cpus` (under TSan serve's too), this script one slot a core
# (--resource-spec-file).
# None asserts a timing.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh

jobs=$(nproc 2>/dev/null || echo 2)
run_config() { # run_config DIR CTEST-ARGS -- CMAKE-ARGS...
    local dir=$1; shift
    local ctest_args=()
    while [[ $1 != -- ]]; do ctest_args+=("$1"); shift; done
    shift
    echo "== $dir: configure, build, test"
    cmake -S . -B "$dir" -DDH_WERROR=ON "$@" > "$dir.configure.log" 2>&1 \
        || { cat "$dir.configure.log"; return 1; }
    cmake --build "$dir" -j "$jobs" > "$dir.build.log" 2>&1 \
        || { cat "$dir.build.log"; return 1; }
    printf '{"version": {"major": 1, "minor": 0}, "local": [{"cpus": [{"id": "0", "slots": %d}]}]}\n' \
        "$jobs" > "$dir/cpus.json"
    (cd "$dir" && ctest -j $((jobs + 3)) --resource-spec-file cpus.json --output-on-failure \
        "${ctest_args[@]}")
}

mkdir -p build
run_config build/release -- -DCMAKE_BUILD_TYPE=RelWithDebInfo
# Sanitizers slow everything down: give Check's per-test timeout room.
CK_TIMEOUT_MULTIPLIER=10 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    run_config build/asan -E e2e_torch -- -DCMAKE_BUILD_TYPE=Debug -DDH_SANITIZE=ON
CK_TIMEOUT_MULTIPLIER=10 TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/tests/tsan.supp" \
    run_config build/tsan -R "test_core|test_probe|test_manifest|test_engine|test_serve|test_sim|test_ring|test_gate|test_store|metrics_prom" -- -DCMAKE_BUILD_TYPE=Debug -DDH_TSAN=ON
echo "== build/fuzz: each target 15 s (asserting its invariants)"
bash scripts/fuzz.sh 15
echo "== all configurations passed"
