#!/usr/bin/env bash
# run_elastic.sh - the time from a rank's death to the restarted job's first batch:
# python/tests/test_elastic.py (torchrun --max_restarts 1, a 2-rank job whose rank 1
# kills itself; `datahelix serve --on-rank-exit wait`) REPEATS times with torchrun's
# default monitor interval (5 s) and with --monitor_interval 1.
#   usage: bench/run_elastic.sh [BUILD_DIR] [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/.."
B=$(cd "${1:-build/release}" && pwd)
REPEATS=${2:-3}
echo "| torchrun monitor interval | death -> first batch of the restarted job (s) |"
echo "|---|---|"
for interval in 5 1; do
    times=""
    for k in $(seq "$REPEATS"); do
        t=$(DH_TORCHRUN_ARGS="--monitor_interval $interval" PYTHONPATH="$B/python" \
            DH_CLI="$B/datahelix" /usr/bin/python3 python/tests/test_elastic.py 2>&1 |
            sed -n 's/^elastic: \([0-9.]*\) s.*/\1/p')
        times="$times${times:+, }${t:-failed}"
    done
    echo "| $interval s | $times |"
done
