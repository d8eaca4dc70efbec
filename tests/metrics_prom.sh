#!/usr/bin/env bash
# metrics_prom.sh - live metrics (--metrics) as Prometheus sees them:
#  1. a run's endpoint, scraped while the engine works: valid exposition (promtool), every
#     series family there, 404 elsewhere, bad --metrics values refused;
#  2. Prometheus from Debian, started here on 127.0.0.1 with a generated config, scrapes a
#     serving agent with two trainer processes attached; the test asks Prometheus's HTTP
#     API and checks that steps, delivered and failed match the agent's own accounting.
# Part 2 needs the Python package and numpy next to the binary (not in sanitizer builds).
#   usage: metrics_prom.sh PATH/TO/datahelix
set -u
DH=${1:?usage: metrics_prom.sh DATAHELIX}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dhprom.XXXXXX")
PIDS=()
# PIDS hold `timeout` wrappers too: killing one leaves its child, so the trainers are found by
# their script's path (two were seen still polling for their .go file hours later)
cleanup() {
    for p in "${PIDS[@]}"; do kill -9 "$p" 2> /dev/null; done
    pkill -9 -f "$WORK/" 2> /dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
source "$(dirname "$0")/lib.sh"
port_of() { grep -o 'metrics at http://127.0.0.1:[0-9]*' "$1" | head -n 1 | sed 's/.*://'; }
wait_for() { # wait_for SECONDS CMD... -> 0 once CMD succeeds
    local t=$1; shift
    for _ in $(seq $((t * 10))); do "$@" && return 0; sleep 0.1; done
    return 1
}

"$DH" gen --workload kinetics-clips --out "$WORK/data" --samples 16 -q > /dev/null 2>&1
check "gen made the media" test -s "$WORK/data/manifest.jsonl"
CUT=$(ls "$WORK/data/video" | head -n 1) # cut short: it fails every time it is scheduled
head -c 3000 "$WORK/data/video/$CUT" > "$WORK/cut" && mv "$WORK/cut" "$WORK/data/video/$CUT"
M="$WORK/data/manifest.jsonl"

# ---- 1. a run's endpoint while the engine works
"$DH" run --manifest "$M" --ranks 2 --workers 2 --batch 4 --steps 0 --metrics 0 \
    > "$WORK/run.out" 2> "$WORK/run.err" &
RUN=$!
PIDS+=($RUN)
wait_for 30 grep -q "metrics at" "$WORK/run.err"
P=$(port_of "$WORK/run.err")
check "run says where its metrics are" test -n "$P"
scraped() { curl -sf "http://127.0.0.1:$P/metrics" > "$WORK/scrape" &&
    grep -Eq '^datahelix_steps_total\{stream="train"\} [1-9]' "$WORK/scrape"; }
check "the endpoint answers with steps as the run goes" wait_for 60 scraped
if command -v promtool > /dev/null; then
    check "promtool accepts the exposition" promtool check metrics < "$WORK/scrape"
else
    check "promtool is installed (scripts/deps.sh: prometheus)" false
fi
for fam in running steps_total samples_delivered_total samples_failed_total \
    sample_failures_total input_wait_seconds deadline_misses_total step_stall_seconds \
    decode_seconds worker_busy_seconds_total pool_bytes pool_budget_bytes leases \
    rebalance_moves_total rebalance_moved_bytes_total lent_samples_total model_error_ratio \
    storage_read_bytes_total storage_requests_total storage_failures_total \
    samples_prepared_total; do
    check "series family datahelix_$fam" contains "$WORK/scrape" "^# TYPE datahelix_$fam "
done
check "a per-rank wait histogram" contains "$WORK/scrape" \
    'datahelix_input_wait_seconds_bucket{stream="train",rank="1",le="+Inf"}'
failures() { curl -sf "http://127.0.0.1:$P/metrics" |
    grep -q 'datahelix_sample_failures_total{stream="train",reason="DH_EDECODE"} [1-9]'; }
check "the cut file's failures by reason" wait_for 60 failures
check "elsewhere: 404" test "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$P/")" = 404
check "not GET: 405" test "$(curl -s -o /dev/null -w '%{http_code}' -X POST \
    "http://127.0.0.1:$P/metrics")" = 405
kill -INT $RUN
wait $RUN
check "the run stopped by Ctrl-C prints its accounting" contains "$WORK/run.out" "delivered"
"$DH" run --manifest "$M" --metrics 127.0.0.1:70000 > /dev/null 2> "$WORK/bad1.err"
check "a port over 65535 is a usage error" test $? -eq 2
check "... naming the range" contains "$WORK/bad1.err" "0 to 65535"
"$DH" run --manifest "$M" --metrics nohost:9 > /dev/null 2> "$WORK/bad2.err"
check "an address that is not IPv4 is refused, named" contains "$WORK/bad2.err" '"nohost" is not an IPv4'
"$DH" sim --workload laion-images --metrics 0 > /dev/null 2> "$WORK/bad3.err"
check "sim refuses --metrics, saying why" contains "$WORK/bad3.err" "live figures"
"$DH" serve --manifest "$M" --ranks 2 --workers 2 --batch 4 --stream val --manifest "$M" \
    --metrics 0 > /dev/null 2> "$WORK/bad4.err"
check "--metrics after --stream: refused, it is the agent's" contains "$WORK/bad4.err" \
    "metrics is the agent's, for every stream"
nc_port=$(grep -o '[0-9]*' <<< "$P")
"$DH" run --manifest "$M" --ranks 2 --workers 2 --batch 4 --steps 2 --metrics "$nc_port" \
    > /dev/null 2> "$WORK/busy.err" &
PIDS+=($!)
wait $!
# the first run is gone: its port is free again, so it is a valid one to take
check "a free port given by number is taken" contains "$WORK/busy.err" "metrics at http://127.0.0.1:$nc_port/"

# ---- 2. Prometheus scrapes an agent with trainers attached
PY=/usr/bin/python3
PYP=$(dirname "$DH")/python
if ! [[ -x $PY && -d $PYP/datahelix ]] || ! $PY -c "import numpy" 2> /dev/null; then
    echo "skip: no Python package or numpy here (Prometheus against an agent with trainers)"
elif ! command -v prometheus > /dev/null; then
    check "prometheus is installed (scripts/deps.sh)" false
else
    SOCK="@dhprom-$$"
    "$DH" serve --manifest "$M" --ranks 2 --workers 2 --batch 4 --steps 0 --socket "$SOCK" \
        --metrics 127.0.0.1:0 > "$WORK/srv.out" 2> "$WORK/srv.err" &
    SRV=$!
    PIDS+=($SRV)
    wait_for 30 grep -q "metrics at" "$WORK/srv.err"
    SP=$(port_of "$WORK/srv.err")
    PP=$($PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    cat > "$WORK/prom.yml" << YML
global:
  scrape_interval: 200ms
  scrape_timeout: 150ms
scrape_configs:
  - job_name: datahelix
    static_configs:
      - targets: ['127.0.0.1:$SP']
YML
    prometheus --config.file="$WORK/prom.yml" --storage.tsdb.path="$WORK/tsdb" \
        --web.listen-address="127.0.0.1:$PP" > "$WORK/prom.log" 2>&1 &
    PIDS+=($!)
    cat > "$WORK/trainer.py" << 'PYEOF'
import os, sys, time, datahelix
rank, sock, steps, done = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
with datahelix.Loader(socket=sock, rank=rank, world_size=2, endless=True) as L:
    it = iter(L)
    for _ in range(steps):
        b = next(it)
        time.sleep(0.05)
        b["release"]()
        del b
    open(done, "w").close()
    while not os.path.exists(done + ".go"):  # attached and idle: the figures stand still
        if not os.path.isdir(os.path.dirname(done)):
            break  # the test is gone
        time.sleep(0.05)
PYEOF
    for r in 0 1; do
        PYTHONPATH=$PYP timeout 120 $PY "$WORK/trainer.py" $r "$SOCK" 12 "$WORK/t$r.done" \
            > "$WORK/t$r.out" 2>&1 &
        PIDS+=($!)
    done
    check "both trainers took 12 batches" wait_for 90 test -e "$WORK/t0.done" -a -e "$WORK/t1.done"
    q() { # q PROMQL -> the value of its one sample, or empty
        curl -sf --get "http://127.0.0.1:$PP/api/v1/query" --data-urlencode "query=$1" |
            $PY -c 'import json, sys
r = json.load(sys.stdin)["data"]["result"]
print(r[0]["value"][1] if len(r) == 1 else "")'
    }
    # Prometheus's latest scrape agrees with the agent's own endpoint once both are still
    steady() {
        local ours
        ours=$(curl -sf "http://127.0.0.1:$SP/metrics" | sed -n 's/^datahelix_steps_total{stream="train"} //p')
        [[ -n "$ours" && "$(q 'datahelix_steps_total{stream="train"}')" == "$ours" ]] && sleep 0.6 &&
            [[ "$(q 'datahelix_steps_total{stream="train"}')" == "$ours" ]]
    }
    up() { [[ "$(q 'up{job="datahelix"}')" == 1 ]]; }
    check "Prometheus scraped the agent (up == 1)" wait_for 60 up
    check "Prometheus holds the agent's figures, still" wait_for 60 steady
    steps=$(q 'datahelix_steps_total{stream="train"}')
    delivered=$(q 'datahelix_samples_delivered_total{stream="train"}')
    failed=$(q 'datahelix_samples_failed_total{stream="train"}')
    reasons=$(q 'sum(datahelix_sample_failures_total{stream="train"})')
    waits=$(q 'sum(datahelix_input_wait_seconds_count{stream="train"})')
    leases=$(q 'datahelix_leases{stream="train"}')
    kill -INT $SRV
    wait $SRV
    touch "$WORK/t0.done.go" "$WORK/t1.done.go"
    line=$(grep -Eo 'delivered [0-9]+ \+ failed [0-9]+ = [0-9]+' "$WORK/srv.out")
    acc_steps=$(sed -n 's/.*, \([0-9]*\) steps, [0-9]* samples$/\1/p' "$WORK/srv.out" | head -n 1)
    read -r _ acc_del _ _ acc_fail _ acc_total <<< "$line"
    echo "  prometheus: steps $steps delivered $delivered failed $failed (by reason $reasons)" \
        "waits $waits leases $leases; agent: steps $acc_steps, $line"
    check "steps as the agent accounts them" test "${steps:-x}" = "${acc_steps:-y}"
    check "delivered as the agent accounts them" test "${delivered:-x}" = "${acc_del:-y}"
    check "failed as the agent accounts them" test "${failed:-x}" = "${acc_fail:-y}"
    check "the cut file failed and was counted" test "${failed:-0}" -ge 1
    check "delivered + failed = steps x batch" test $((delivered + failed)) -eq $((steps * 4))
    check "a wait per rank per step after the first" test "${waits:-0}" = $((2 * (steps - 1)))
    check "no lease held once the trainers released theirs" test "${leases:-x}" = 0
    [[ $fail -eq 0 ]] || cat "$WORK/srv.out" "$WORK/srv.err" "$WORK/t0.out" "$WORK/prom.log" | tail -40
fi
echo "metrics_prom: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
