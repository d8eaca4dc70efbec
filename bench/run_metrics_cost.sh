#!/usr/bin/env bash
# run_metrics_cost.sh - what --metrics costs the data path (issue 26), measured on this machine
# with real decoding (kinetics-clips, mini scale):
#   1. runs of the real engine (2 ranks, 2 workers) without --metrics and with it, scraped
#      once a second by curl as Prometheus would, interleaved REPS times (order alternating): throughput
#      (the curl processes share this machine's 2 cores with the run: part of the cost);
#   2. scrape latency: SCRAPES scrapes at 10 a second of a run that decodes meanwhile (curl's
#      time_total: connect, render, transfer), and the endpoint thread's own CPU per scrape
#      (its /proc ticks over the scrapes; 10 ms resolution, so over many scrapes).
#   usage: bash bench/run_metrics_cost.sh BUILD_DIR [REPS] [SCRAPES]
set -euo pipefail
B=${1:?usage: run_metrics_cost.sh BUILD_DIR [REPS] [SCRAPES]}
REPS=${2:-5}; SCRAPES=${3:-300}
DH=$B/datahelix
[[ -x $DH ]] || { echo "run_metrics_cost.sh: $DH is missing (build the release tree)" >&2; exit 2; }
OUT=$(mktemp -d "${TMPDIR:-/tmp}/dhmcost.XXXXXX")
trap 'kill $(jobs -p) 2> /dev/null; rm -rf "$OUT"' EXIT
"$DH" gen --workload kinetics-clips --out "$OUT/data" --samples 64 -q > /dev/null
M=$OUT/data/manifest.jsonl
field() { sed -n "s/.*\"$2\":\([0-9.e+-]*\).*/\1/p" "$1" | head -n 1; }
RUN=(--manifest "$M" --workload kinetics-clips --ranks 2 --workers 2 --batch 8 --steps 120 -q)

echo "== 1. the data path, with and without --metrics scraped every second ($REPS pairs)"
printf "%-4s %-8s %12s\n" rep metrics samples/s
for rep in $(seq "$REPS"); do
    order="off on"
    [[ $((rep % 2)) -eq 0 ]] && order="on off" # alternate: drift of the machine cancels out
    for mode in $order; do
        extra=()
        [[ $mode == on ]] && extra=(--metrics 0)
        "$DH" run "${RUN[@]}" "${extra[@]}" --json "$OUT/$mode.$rep.json" > /dev/null 2> "$OUT/err" &
        pid=$!
        if [[ $mode == on ]]; then
            for _ in $(seq 50); do grep -q "metrics at" "$OUT/err" && break; sleep 0.1; done
            url=$(grep -o 'http://[0-9.:]*/metrics' "$OUT/err")
            while kill -0 $pid 2> /dev/null; do curl -s -o /dev/null "$url" || true; sleep 1; done &
        fi
        wait $pid
        tp=$(field "$OUT/$mode.$rep.json" throughput_sps)
        printf "%-4s %-8s %12.1f\n" "$rep" "$mode" "$tp"
        echo "$mode $tp" >> "$OUT/tp"
    done
done
awk '{s[$1] += $2; n[$1]++; if (!($1 in lo) || $2 < lo[$1]) lo[$1] = $2; if ($2 > hi[$1]) hi[$1] = $2}
     END {for (m in s) printf "metrics %-3s: mean %.1f samples/s (range %.1f-%.1f)\n", m, s[m] / n[m], lo[m], hi[m];
          printf "on / off: %.3f\n", (s["on"] / n["on"]) / (s["off"] / n["off"])}' "$OUT/tp"

echo "== 2. scrape latency and the endpoint's CPU ($SCRAPES scrapes at 10 a second, a run decoding)"
"$DH" run --manifest "$M" --workload kinetics-clips --ranks 2 --workers 2 --batch 8 --steps 0 \
    --metrics 0 -q > /dev/null 2> "$OUT/err" &
pid=$!
started=$(date +%s.%N)
for _ in $(seq 50); do grep -q "metrics at" "$OUT/err" && break; sleep 0.1; done
url=$(grep -o 'http://[0-9.:]*/metrics' "$OUT/err")
sleep 2
mhd=$(grep -l '^MHD' /proc/$pid/task/*/comm | head -n 1 | xargs dirname)
ticks() { awk '{print $14 + $15}' "$1/stat"; }
t0=$(ticks "$mhd")
for _ in $(seq "$SCRAPES"); do
    curl -s -o /dev/null -w '%{time_total} %{size_download}\n' "$url" >> "$OUT/lat"
    sleep 0.1
done
t1=$(ticks "$mhd")
curl -s "$url" > "$OUT/last"
elapsed=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN {print b - a}')
kill -INT $pid
wait $pid || true
hz=$(getconf CLK_TCK)
busy=$(sed -n 's/^datahelix_worker_busy_seconds_total{stream="train"} //p' "$OUT/last")
sort -n "$OUT/lat" | awk -v ticks=$((t1 - t0)) -v hz="$hz" -v n="$SCRAPES" -v busy="$busy" \
    -v secs="$elapsed" '
    {v[NR] = $1; bytes = $2}
    END {printf "scrape latency ms: p50 %.2f  p95 %.2f  max %.2f  (%d bytes a page)\n",
             1e3 * v[int(NR * 0.5)], 1e3 * v[int(NR * 0.95)], 1e3 * v[NR], bytes;
         printf "endpoint thread CPU: %d ticks over %d scrapes = %.3f ms a scrape\n",
             ticks, n, 1e3 * ticks / hz / n;
         printf "workers busy %.2f CPU-s a second; one scrape a second costs %.4f%% of that\n",
             busy / secs, 100 * (ticks / hz / n) / (busy / secs)}'
