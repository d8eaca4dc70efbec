#!/usr/bin/env bash
# run_report.sh - how long `datahelix report` takes on a long trace (issue 26): a real run
# of STEPS steps (default 10,000; laion-images thumbnails decoded for real, 2 ranks, 2
# workers, a global batch of 8, GPU time scaled down with --rho so the run takes about a
# minute here) traced with --trace, then the report of its result and trace, REPS times
# (wall time of the whole command; the trace's and the page's sizes).
#   usage: bash bench/run_report.sh BUILD_DIR [STEPS] [REPS]
set -euo pipefail
B=${1:?usage: run_report.sh BUILD_DIR [STEPS] [REPS]}
STEPS=${2:-10000}; REPS=${3:-5}
DH=$B/datahelix
[[ -x $DH ]] || { echo "run_report.sh: $DH is missing (build the release tree)" >&2; exit 2; }
OUT=$(mktemp -d "${TMPDIR:-/tmp}/dhreport.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
"$DH" gen --workload laion-images --out "$OUT/data" --samples 64 -q > /dev/null
t0=$(date +%s.%N)
"$DH" run --manifest "$OUT/data/manifest.jsonl" --workload laion-images --ranks 2 --workers 2 \
    --batch 8 --steps "$STEPS" --rho 0.2 -q --trace "$OUT/trace.json" --json "$OUT/run.json" \
    > /dev/null
t1=$(date +%s.%N)
events=$(grep -c '"ph":"X"' "$OUT/trace.json")
printf "traced run: %s steps in %.1f s; trace %.1f MiB, %s events\n" "$STEPS" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')" \
    "$(awk -v s="$(stat -c %s "$OUT/trace.json")" 'BEGIN {print s / 1048576}')" "$events"
for rep in $(seq "$REPS"); do
    /usr/bin/time -f "%e %M" -o "$OUT/time" "$DH" report "$OUT/run.json" --trace "$OUT/trace.json" \
        -o "$OUT/report.html" > /dev/null
    read -r secs rss < "$OUT/time"
    printf "report %d: %.2f s, peak RSS %d MiB, page %.2f MiB\n" "$rep" "$secs" $((rss / 1024)) \
        "$(awk -v s="$(stat -c %s "$OUT/report.html")" 'BEGIN {print s / 1048576}')"
done
