#!/usr/bin/env bash
# e2e_torch.sh - the PyTorch DataLoader contender of `bench --mode real` on
# real generated media: video, any-res tiled images and audio through PyAV,
# accounting, a corrupt file, a missing torch, an interrupted run.
#   usage: e2e_torch.sh PATH/TO/datahelix
set -u
DH=${1:?usage: e2e_torch.sh PATH/TO/datahelix}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dhtorch.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
export TMPDIR=$WORK # the contender's files and processes are found under it
source "$(dirname "$0")/lib.sh"
PY=${DH_PYTHON:-/usr/bin/python3}
if ! "$PY" -c "import torch, av, numpy" 2> /dev/null; then
    echo "SKIP: $PY cannot import torch, av and numpy (apt-get install python3-torch python3-av)"
    exit 0
fi
# torch_runs FILE: "policy delivered failed samples steps" of each torch run of a bench JSON
torch_runs() {
    "$PY" - "$1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["runs"]:
    if r["policy"] == "torch":
        print(r["workload"], r["delivered"], r["failed"], r["samples"], r["steps"],
              int(r["throughput_sps"] > 0), int(0 <= r["miss_rate"] <= 1),
              int(r["stall_p95_ms"] >= 0))
EOF
}
small=(--ranks 2 --workers 2 --batch 4 --steps 3 --repeats 1 --run-seconds 0)

# ---- three media kinds: video, tiled images, audio (log-mel) ----
"$DH" bench --mode real --workloads kinetics-clips,anyres-images,speech-asr --policies local,torch \
    "${small[@]}" --data "$WORK/bd" --json "$WORK/b.json" > "$WORK/b.out" 2> "$WORK/b.err"
check "bench with torch exits 0" test $? -eq 0
torch_runs "$WORK/b.json" > "$WORK/runs.txt"
check "a torch run per workload" test "$(wc -l < "$WORK/runs.txt")" -eq 3
check "torch runs deliver every sample of 3 steps" \
    test "$(grep -c ' 12 0 12 3 1 1 1$' "$WORK/runs.txt")" -eq 3
check "the table has torch rows" contains "$WORK/b.out" "speech-asr .*torch"
check "torch rows compare with the simulated local" contains "$WORK/b.out" "simulated local"
check "the summary compares helix... or local with torch" contains "$WORK/b.json" '"summary"'
check "no contender files are left" test -z "$(ls -d "$WORK"/dh-bench-torch-* 2> /dev/null)"

# ---- the default real policies include torch ----
"$DH" bench --mode real --workloads kinetics-clips "${small[@]}" --data "$WORK/bd" \
    --json "$WORK/d.json" > "$WORK/d.out" 2>&1
check "torch is a default real-mode contender" contains "$WORK/d.out" "kinetics-clips .*torch"
check "the summary compares helix with torch" contains "$WORK/d.json" '"tput_geomean_vs_torch"'

# ---- the WebDataset-style contender over shards (video, tiled images) ----
"$DH" bench --mode real --format wds --workloads kinetics-clips,anyres-images "${small[@]}" \
    --data "$WORK/bd" --json "$WORK/w.json" > "$WORK/w.out" 2> "$WORK/w.err"
check "bench --format wds exits 0" test $? -eq 0
check "bench --format wds makes shards" test -f "$WORK/bd/kinetics-clips-wds/shards/00003.tar"
check "wds is the default contender on shards" contains "$WORK/w.out" "anyres-images .*wds"
sed -i 's/"policy":"wds"/"policy":"torch"/' "$WORK/w.json" # torch_runs reads torch rows
check "wds runs deliver every sample of 3 steps" \
    test "$(torch_runs "$WORK/w.json" | grep -c ' 12 0 12 3 1 1 1$')" -eq 2
check "the summary compares helix with wds" contains "$WORK/w.out" "vs wds"
"$DH" bench --mode real --workloads kinetics-clips --policies wds "${small[@]}" \
    --data "$WORK/bd" > /dev/null 2> "$WORK/wf.err"
check "the wds contender without shards is refused, saying why" contains "$WORK/wf.err" \
    "reads WebDataset shards: add --format wds"
# a member damaged inside its shard: named by both, counted failed, the run goes on
cp -r "$WORK/bd/kinetics-clips-wds" "$WORK/bdw-bad"
mkdir -p "$WORK/bdw" && mv "$WORK/bdw-bad" "$WORK/bdw/kinetics-clips-wds"
off=$(sed -n '1s/.*"offset":\([0-9]*\).*/\1/p' "$WORK/bdw/kinetics-clips-wds/manifest.jsonl")
head -c 3000 /dev/urandom | dd of="$WORK/bdw/kinetics-clips-wds/shards/00000.tar" bs=1 \
    seek=$((off + 8)) conv=notrunc status=none
"$DH" bench --mode real --format wds --workloads kinetics-clips --policies helix,wds \
    "${small[@]}" --cpu-cost-scale 1 --data "$WORK/bdw" --json "$WORK/wb.json" \
    > "$WORK/wb.out" 2> "$WORK/wb.err"
check "bench wds with a damaged member exits 0" test $? -eq 0
check "the damaged member is named by the contender" contains "$WORK/wb.err" \
    "torch contender: sample shards/00000.tar:00000000"
sed -i 's/"policy":"wds"/"policy":"torch"/' "$WORK/wb.json"
check "wds: delivered + failed = scheduled, the damaged one failed" \
    test "$(torch_runs "$WORK/wb.json" | awk '{print ($2 + $3 == $4 && $3 >= 1)}')" = 1

# ---- a corrupt file: named, counted failed, the run goes on ----
cp -r "$WORK/bd/kinetics-clips" "$WORK/bad"
victim=$(sed -n 's/.*"path":"\([^"]*\)".*/\1/p' "$WORK/bad/manifest.jsonl" | head -n 1)
head -c 300 /dev/urandom > "$WORK/bad/$victim"
mkdir -p "$WORK/bd2" && mv "$WORK/bad" "$WORK/bd2/kinetics-clips"
"$DH" bench --mode real --workloads kinetics-clips --policies torch "${small[@]}" \
    --cpu-cost-scale 1 --data "$WORK/bd2" --json "$WORK/c.json" > "$WORK/c.out" 2> "$WORK/c.err"
check "bench with a corrupt file exits 0" test $? -eq 0
check "the corrupt sample is named with its file" contains "$WORK/c.err" "torch contender: sample .*$victim"
check "delivered + failed = scheduled" test "$(torch_runs "$WORK/c.json" | awk '{print ($2 + $3 == $4 && $3 >= 1)}')" = 1

# ---- torch missing: skipped with the reason, the others still run ----
DH_PYTHON=/bin/false "$DH" bench --mode real --workloads kinetics-clips "${small[@]}" \
    --data "$WORK/bd" > "$WORK/m.out" 2>&1
check "a missing torch is not a failure" test $? -eq 0
check "a missing torch is said, with the install command" contains "$WORK/m.out" \
    "torch contender skipped: .*apt-get install python3-torch"
check "the other policies still run" contains "$WORK/m.out" "kinetics-clips .*helix"
"$DH" bench --mode sim --policies torch > /dev/null 2> "$WORK/s.err"
check "torch is refused in the simulator" contains "$WORK/s.err" "use it with --mode real"

# ---- interrupted: exit 130, no contender process left behind ----
"$DH" bench --mode real --workloads kinetics-clips --policies torch --ranks 2 --workers 2 \
    --batch 4 --steps 400 --repeats 1 --run-seconds 0 --cpu-cost-scale 1 --data "$WORK/bd" \
    > "$WORK/i.out" 2>&1 &
pid=$!
for _ in $(seq 100); do pgrep -f "$WORK/dh-bench-torch" > /dev/null && break; sleep 0.1; done
sleep 2
kill -INT $pid
wait $pid
check "an interrupted torch run exits 130" test $? -eq 130
sleep 1
check "no contender process is left" test -z "$(pgrep -f "$WORK/dh-bench-torch")"

echo "e2e_torch: $pass passed, $fail failed"
test $fail -eq 0
