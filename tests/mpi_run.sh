#!/usr/bin/env bash
# mpi_run.sh - the real engine on several nodes under mpirun on this one machine:
# exactly once and byte-equal (against the one-node engine), the agent's `run` on 2
# and 4 nodes with a corrupt file, a killed node named by the survivors with their
# accounting, and agents started on different jobs.
#   usage: mpi_run.sh PATH/TO/datahelix PATH/TO/mpi_nodes
set -u
DH=${1:?usage: mpi_run.sh DATAHELIX MPI_NODES}
NODES=${2:?usage: mpi_run.sh DATAHELIX MPI_NODES}
MPIRUN=(mpirun --oversubscribe --mca btl_vader_single_copy_mechanism none)
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dhmpirun.XXXXXX")
cleanup() { [[ -n "${BG:-}" ]] && kill -9 -- -"$BG" 2> /dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
source "$(dirname "$0")/lib.sh"

# 24 small clips, one of them cut short (it fails every time it is scheduled).
"$DH" gen --workload kinetics-clips --out "$WORK/data" --samples 24 > /dev/null 2>&1
check "gen made the media" test -s "$WORK/data/manifest.jsonl"
CUT=$(ls "$WORK/data/video" | head -n 1)
head -c 3000 "$WORK/data/video/$CUT" > "$WORK/cut" && mv "$WORK/cut" "$WORK/data/video/$CUT"
M="$WORK/data/manifest.jsonl"

# Exactly once, byte-equal: the nodes' deliveries together are the one-node run's.
for pol in helix pool local; do
    "$NODES" "$M" $pol 4 4 8 6 "$WORK/one.$pol" > /dev/null 2> "$WORK/one.$pol.err"
    check "$pol: one node runs" test $? -eq 0
    sort "$WORK/one.$pol" > "$WORK/one.$pol.sorted"
    check "$pol: one node delivers 6 steps x 8" test "$(wc -l < "$WORK/one.$pol.sorted")" -eq 48
    for np in 2 4; do
        timeout 120 "${MPIRUN[@]}" -np $np "$NODES" "$M" $pol 4 4 8 6 "$WORK/n$np.$pol" \
            > "$WORK/n$np.$pol.out" 2> "$WORK/n$np.$pol.err"
        check "$pol on $np nodes: exit 0" test $? -eq 0
        check "$pol on $np nodes: every node accounts for the whole run" \
            test "$(grep -c "steps 6 delivered 4[0-9] failed [0-9]* nodes $np rc 0 " "$WORK/n$np.$pol.out")" -eq $np
        cat "$WORK/n$np.$pol".node* | sort > "$WORK/n$np.$pol.sorted"
        check "$pol on $np nodes: each sample once, the same bytes as on one node" \
            cmp -s "$WORK/n$np.$pol.sorted" "$WORK/one.$pol.sorted"
        [[ $fail -eq 0 ]] || { cat "$WORK/n$np.$pol.out" "$WORK/n$np.$pol.err"; }
    done
done
check "the cut clip failed and was delivered marked" grep -q ' -[0-9]* ' "$WORK/one.helix.sorted"
# A mode of mpi_nodes on 2 nodes of 2 ranks against one node in that mode: each sample once,
# the same bytes (and draws) whichever node decoded it. against_one_node MODE WHAT
against_one_node() {
    "$NODES" "$M" helix 4 4 8 6 "$WORK/$1.1" "$1" > /dev/null 2> "$WORK/$1.1.err"
    check "$1: one node runs" test $? -eq 0
    sort "$WORK/$1.1" > "$WORK/$1.1.sorted"
    timeout 120 "${MPIRUN[@]}" -np 2 "$NODES" "$M" helix 4 4 8 6 "$WORK/$1.2" "$1" \
        > "$WORK/$1.2.out" 2> "$WORK/$1.2.err"
    check "$1 on 2 nodes: exit 0" test $? -eq 0
    cat "$WORK/$1.2".node* | sort > "$WORK/$1.2.sorted"
    check "$1 on 2 nodes: each sample once, $2 as on one node" \
        cmp -s "$WORK/$1.2.sorted" "$WORK/$1.1.sorted"
}
# Random augmentation (--augment's crops, clips, flips): every sample's bytes and draw.
against_one_node augment "the same bytes and draws"
check "augment: the draws change the bytes" \
    bash -c "! cmp -s '$WORK/augment.1.sorted' '$WORK/one.helix.sorted'"
# --order stratified: each step comes laid out by node and is dealt as laid out.
against_one_node stratified "the same bytes"
grep -h "lent" "$WORK"/n*.helix.out | sed 's/^/  helix lending (by timing): /'

# Rebalancing moves over the wire: sample 0 costs 100 s once prepared (every other 1 s) and
# consumers hold each batch 300 ms, so the plan agreed at each exchange moves samples off
# its rank, across nodes (one rank per node; small images: every next step is prepared well
# within the hold). The one-node run (4 ranks) delivers the same samples in every step.
# With random augmentation ("augment", 2 nodes) samples moved across nodes keep their draws.
"$DH" gen --workload laion-images --out "$WORK/img" --samples 16 > /dev/null 2>&1
MI="$WORK/img/manifest.jsonl"
for mode in heavy augment; do
    extra=(heavy); nps=(2 4)
    [[ $mode == augment ]] && extra=(heavy augment) && nps=(2)
    "$NODES" "$MI" helix 4 4 8 5 "$WORK/$mode.1" "${extra[@]}" > /dev/null 2> "$WORK/$mode.1.err"
    check "$mode: one node runs" test $? -eq 0
    sort "$WORK/$mode.1" > "$WORK/$mode.1.sorted"
    for np in "${nps[@]}"; do
        t="$WORK/$mode.$np"
        timeout 120 "${MPIRUN[@]}" -np $np "$NODES" "$MI" helix $np 4 8 5 "$t" "${extra[@]}" \
            > "$t.out" 2> "$t.err"
        check "$mode on $np nodes: exit 0" test $? -eq 0
        cat "$t".node* | sort > "$t.sorted"
        check "$mode on $np nodes: each sample once, the same bytes (and draws) as on one node" \
            cmp -s "$t.sorted" "$WORK/$mode.1.sorted"
        check "$mode on $np nodes: every node counts the same moves, some across nodes" \
            test "$(grep -Ec "delivered 40 failed 0 nodes $np rc 0 .* moved ([0-9]+) remote [1-9]" \
                "$t.out")" -eq $np
        [[ $fail -eq 0 ]] || { cat "$t.out" "$t.err"; }
    done
done
grep -h "moved" "$WORK"/heavy.[24].out | sed -n 's/^node 0: .*\(moved .*\)/  heavy: \1/p'

# Moves by groups of nodes: 6 nodes of 2 ranks are 2 groups (of 4 nodes and of 2), and each
# node plans only its group's moves, seeing the plan at its group's positions alone.
"$DH" gen --workload laion-images --out "$WORK/img48" --samples 48 > /dev/null 2>&1
MI="$WORK/img48/manifest.jsonl"
"$NODES" "$MI" helix 12 12 24 5 "$WORK/groups.1" heavy > /dev/null 2> "$WORK/groups.1.err"
check "groups: one node of 12 ranks runs" test $? -eq 0
t="$WORK/groups.6"
timeout 120 "${MPIRUN[@]}" -np 6 "$NODES" "$MI" helix 12 12 24 5 "$t" heavy > "$t.out" 2> "$t.err"
check "groups on 6 nodes of 2 ranks: exit 0" test $? -eq 0
check "groups on 6 nodes of 2 ranks: each sample once, the same bytes as on one node" \
    cmp -s <(cat "$t".node* | sort) <(sort "$WORK/groups.1")
check "groups on 6 nodes of 2 ranks: every node counts the same moves, some across nodes" \
    test "$(grep -Ec "delivered 120 failed 0 nodes 6 rc 0 .* moved ([0-9]+) remote [1-9]" \
        "$t.out")" -eq 6
[[ $fail -eq 0 ]] || { cat "$t.out" "$t.err"; }

# Lending over the wire: the run accounts for loans in the lend keys; a prohibitive network
# (1000 s per transfer) lends nothing and counts every loan considered as gated.
for lat in 16 1000000000; do
    timeout 120 "${MPIRUN[@]}" -np 2 "$DH" run --manifest "$M" --workload kinetics-clips \
        --ranks 4 --workers 2 --batch 8 --steps 24 --net-latency-us $lat \
        --json "$WORK/lend$lat.json" > "$WORK/lend$lat.out" 2> "$WORK/lend$lat.err"
    check "lending run (latency $lat us): exit 0" test $? -eq 0
done
python3 - "$WORK/lend16.json" "$WORK/lend1000000000.json" << 'EOF2' || { fail=$((fail + 1)); echo "FAIL: lending keys"; }
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
for r in (a, b):
    assert r["delivered"] + r["failed"] == r["samples"] == 192, r
    assert r["lent"] <= r["lend_considered"] and r["lend_gated"] <= r["lend_considered"], r
# bytes are shipped only for loans; a loan of the dataset's broken sample ships none
assert a["bytes_shipped"] == 0 or a["lent"] > 0, a
assert a["lent"] == 0 or a["bytes_shipped"] > 0 or a["failed"] > 0, a
assert b["lent"] == 0 and b["bytes_shipped"] == 0 and b["lend_gated"] == b["lend_considered"], b
print("  lending: %d of %d considered lent (%.1f MiB); prohibitive: %d considered, all gated"
      % (a["lent"], a["lend_considered"], a["bytes_shipped"] / 2**20, b["lend_considered"]))
EOF2

# The agent: `mpirun -np N datahelix run`, node 0 reports; the cut file is named.
for np in 2 4; do
    timeout 120 "${MPIRUN[@]}" -np $np "$DH" run --manifest "$M" --workload kinetics-clips \
        --ranks 4 --workers 4 --batch 8 --steps 9 --json "$WORK/run$np.json" \
        > "$WORK/run$np.out" 2> "$WORK/run$np.err"
    check "run on $np nodes: exit 0" test $? -eq 0
    check "run on $np nodes: the result says so" contains "$WORK/run$np.out" "R=4 W=4 on $np nodes"
    check "run on $np nodes: exact accounting" \
        grep -Eq 'delivered ([0-9]+) \+ failed ([0-9]+) = 72' "$WORK/run$np.out"
    check "run on $np nodes: one result, from node 0" test "$(grep -c '^  makespan' "$WORK/run$np.out")" -eq 1
    check "run on $np nodes: json" contains "$WORK/run$np.json" "\"nodes\":$np,"
    check "run on $np nodes: the cut file is named" contains "$WORK/run$np.err" "$CUT"
    check "run on $np nodes: exchange cost reported" contains "$WORK/run$np.out" "step exchange between nodes"
    [[ $fail -eq 0 ]] || { cat "$WORK/run$np.out" "$WORK/run$np.err"; }
done
python3 - "$WORK/run2.json" << 'EOF' || { fail=$((fail + 1)); echo "FAIL: json accounting"; }
import json, sys
r = json.load(open(sys.argv[1]))
assert r["delivered"] + r["failed"] == r["samples"] == 72 and r["failed"] >= 1, r
assert r["nodes"] == 2 and r["exchange_mean_s"] > 0, r
EOF

# Different jobs on different nodes are refused by every node, naming the difference.
timeout 60 "${MPIRUN[@]}" -np 1 "$DH" run --manifest "$M" --ranks 2 --workers 2 --batch 8 \
    --steps 2 --seed 1 : -np 1 "$DH" run --manifest "$M" --ranks 2 --workers 2 --batch 8 \
    --steps 2 --seed 2 > "$WORK/mix.out" 2> "$WORK/mix.err"
check "different jobs: nonzero exit" test $? -ne 0
check "different jobs: named" contains "$WORK/mix.err" "node 1 was started on another job than node 0: --seed differs"
# A node that cannot load its manifest tells the others why (node 0 said only that node 1
# "stopped before the run (its messages say why)": a user trial).
timeout 60 "${MPIRUN[@]}" -np 1 "$DH" run --manifest "$M" --ranks 2 --workers 2 --batch 8 \
    --steps 2 : -np 1 "$DH" run --manifest "$WORK/nope/manifest.jsonl" --ranks 2 --workers 2 \
    --batch 8 --steps 2 > /dev/null 2> "$WORK/nomani.err"
check "a node without its manifest: nonzero exit" test $? -ne 0
check "a node without its manifest: node 0 names the file and the cause" \
    contains "$WORK/nomani.err" \
    "node 0 .*node 1 (.*) failed: $WORK/nope/manifest.jsonl: cannot open manifest: no such file"
timeout 60 "${MPIRUN[@]}" -np 2 "$DH" run --manifest "$M" --ranks 2 --workers 2 --batch 8 \
    --nodes 3 > /dev/null 2> "$WORK/nodes.err"
check "--nodes that contradicts mpirun is refused" contains "$WORK/nodes.err" "mpirun started 2 processes"
# serve --stream on several nodes: a usage error (it exited 1 as a failed run: a trial)
timeout 60 "${MPIRUN[@]}" -np 2 "$DH" serve --manifest "$M" --ranks 2 --workers 2 --batch 4 \
    --steps 0 --stream val --manifest "$M" --batch 2 > /dev/null 2> "$WORK/streams.err"
check "serve --stream on several nodes: exit 2" test $? -eq 2
check "serve --stream on several nodes: said why" contains "$WORK/streams.err" \
    "several streams are served on one node only"
# --batch (or --ranks) differs: the records differ in size, and the greeting named neither
# (a user's trial: "node 0 exchanges records of 1088 bytes, this node 1152").
timeout 60 "${MPIRUN[@]}" -np 1 "$DH" run --manifest "$M" --ranks 2 --workers 2 --batch 8 \
    --steps 2 : -np 1 "$DH" run --manifest "$M" --ranks 2 --workers 2 --batch 6 \
    --steps 2 > /dev/null 2> "$WORK/mixb.err"
check "--batch differs: named" contains "$WORK/mixb.err" "node 1 was started with --batch 6, this node with 8"

# Agents of different jobs are refused when they start, before they wait for trainers (it
# took every trainer attaching before: with none, both listened until killed).
timeout 60 "${MPIRUN[@]}" -np 1 "$DH" serve --manifest "$M" --ranks 2 --workers 2 --batch 8 \
    --socket "@dhmpi-ml-$$-0" --max-leases 4 : -np 1 "$DH" serve --manifest "$M" --ranks 2 \
    --workers 2 --batch 8 --socket "@dhmpi-ml-$$-1" --max-leases 3 > /dev/null \
    2> "$WORK/mixserve.err"
rc=$?
check "agents of different jobs: refused at once (rc $rc)" test $rc -ne 0 -a $rc -ne 124
check "agents of different jobs: the setting named" \
    contains "$WORK/mixserve.err" "node 1 was started on another job than node 0: --max-leases differs"

# Two agents on one host under one --socket name (no %n): the one that cannot listen says the
# likely cause, and the other is told why it stopped (it waited out the node timeout and
# said the node "stopped responding" before: a user's trial).
DH_JOB="samename$$" DH_NODE_TIMEOUT=600 timeout 120 "${MPIRUN[@]}" -np 2 "$DH" serve \
    --manifest "$M" --ranks 2 --workers 2 --batch 4 --steps 0 --attach-timeout 300 \
    > /dev/null 2> "$WORK/samename.err"
rc=$?
check "one socket name for two agents: refused (rc $rc)" test $rc -ne 0 -a $rc -ne 124
check "one socket name for two agents: %n suggested" \
    contains "$WORK/samename.err" "Address already in use.*distinct names: --socket @NAME%n"
check "one socket name for two agents: the other node told why" \
    contains "$WORK/samename.err" "node [01] (.*) failed: cannot listen on @datahelix-[0-9]*-samename"
[[ $fail -eq 0 ]] || cat "$WORK/samename.err"

# A killed node: the survivors name it within the node timeout and print their accounting.
# It dies once node 0's progress lines say 3 steps are done (a fixed delay killed it before
# the first step on a loaded machine, leaving nothing to account for).
DH_PROGRESS_SECONDS=0.1 DH_NODE_TIMEOUT=2 setsid timeout 120 "${MPIRUN[@]}" --enable-recovery -np 3 "$DH" run \
    --manifest "$M" --ranks 3 --workers 3 --batch 6 --steps 100000 \
    > "$WORK/kill.out" 2> "$WORK/kill.err" &
BG=$!
victim=""
# the nodes themselves: command lines that start with the binary (mpirun's and timeout's
# carry the same arguments, and a pid wrapped past pid_max (32768 here) can be the highest)
node_pids() { pgrep -f -- "^$DH run --manifest $M --ranks 3 --workers 3"; }
for _ in $(seq 100); do
    sleep 0.1
    victim=$(node_pids | tail -n 1)
    [[ -n "$victim" ]] && grep -q . <(node_pids | sed -n 3p) && break
done
for _ in $(seq 600); do
    grep -Eq 'run: ([3-9]|[1-9][0-9]+)/100000 steps' "$WORK/kill.err" && break
    sleep 0.1
done
check "killed node: the run made progress first" grep -Eq 'run: [0-9]+/100000 steps' "$WORK/kill.err"
kill -9 "$victim" 2> /dev/null
wait $BG
rc=$?
BG=""
check "killed node: the job ends, no hang" test $rc -ne 124
check "killed node: both survivors name it" \
    test "$(grep -c 'stopped responding' "$WORK/kill.err")" -ge 2
check "killed node: the survivors print their accounting" \
    test "$(grep -c 'the accounting of the' "$WORK/kill.err")" -eq 2
check "killed node: whose step in flight may be counted by some survivors only" \
    test "$(grep -c 'one in flight when a node died' "$WORK/kill.err")" -eq 2
accounts=$(grep -Eo 'delivered [0-9]+ \+ failed [0-9]+ = [0-9]+' "$WORK/kill.out" |
    awk '$2 + $5 == $7 && $7 > 0' | wc -l)
check "killed node: each survivor's accounting is exact" test "$accounts" -eq 2
[[ $fail -eq 0 ]] || { cat "$WORK/kill.out" "$WORK/kill.err"; }
# serve on 2 nodes (issue 22 #11): a fault on one node reaches the other node's trainers and
# agent with its reason (it read "the process at the other end died or disconnected").
PY=/usr/bin/python3
PYP=$(dirname "$DH")/python
if [[ -x $PY && -d $PYP/datahelix ]] && $PY -c "import numpy" 2> /dev/null; then
    cat > "$WORK/trainer.py" << 'PYEOF'
import os, sys, time, datahelix
rank, job = int(sys.argv[1]), sys.argv[2]
pause = sys.argv[3] if len(sys.argv) > 3 else None # a file: stop taking, then fail as DDP does
try:
    with datahelix.Loader(socket="@dhmpi-%d-%s" % (rank, job), rank=rank, world_size=2,
                          endless=True) as L:
        for b in L:
            print("took", b["step"], flush=True)
            time.sleep(0.2)
            if pause and os.path.exists(pause):
                print("paused", flush=True)
                while not os.path.exists(pause + ".go"):
                    time.sleep(0.05)
                raise RuntimeError("Connection closed by peer (emulated collective)")
    print("done", flush=True)
except datahelix.PeerLost as e:
    print("LOST", e.name, e.message, flush=True)
    sys.exit(3)
PYEOF
    serve2() { # serve2 TAG: a 2-node agent in the background (pid in SRV), its trainers
        DH_NODE_TIMEOUT=3 setsid timeout 120 "${MPIRUN[@]}" --enable-recovery -np 2 "$DH" \
            serve --manifest "$M" --ranks 2 --workers 2 --batch 4 --steps 0 \
            --socket "@dhmpi-%n-$1" > "$WORK/$1.srv.out" 2> "$WORK/$1.srv.err" &
        SRV=$!
        for r in 0 1; do
            PYTHONPATH=$PYP timeout 100 $PY "$WORK/trainer.py" $r "$1" ${2:+"$2"} \
                > "$WORK/$1.t$r" 2>&1 &
            eval "T$r=\$!"
        done
        for _ in $(seq 300); do
            [[ $(grep -c took "$WORK/$1.t1" 2> /dev/null) -ge 2 ]] && break
            sleep 0.1
        done
    }
    serve2 "tr$$"
    pkill -9 -P "$T1" # the trainer itself (timeout's child)
    wait "$T0"
    check "serve, 2 nodes, a trainer killed: the other node's trainer is told (PeerLost)" \
        contains "$WORK/tr$$.t0" "LOST DH_EPEER"
    check "serve, 2 nodes, a trainer killed: ...naming its rank" \
        contains "$WORK/tr$$.t0" "rank 1 (pid [0-9]*) died or disconnected"
    wait "$SRV" # (mpirun --enable-recovery exits 0 whatever its processes did)
    check "serve, 2 nodes, a trainer killed: node 0's agent names the rank" \
        contains "$WORK/tr$$.srv.err" "node 1 stopped the run: rank 1 (pid"
    serve2 "nd$$"
    for p in $(pgrep -f -- "^$DH serve --manifest $M --ranks 2"); do # node 1's agent
        tr '\0' '\n' < /proc/$p/environ 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" &&
            kill -9 "$p"
    done
    wait "$T0"
    check "serve, 2 nodes, a node killed: its trainer on node 0 is told which node" \
        contains "$WORK/nd$$.t0" "LOST DH_EPEER node 1 (.*) stopped responding"
    pkill -9 -P "$T1" 2> /dev/null
    wait "$SRV"
    # Under DDP a rank dies and its peer on the other node fails in the collective, before
    # DataHelix tells it: node 0's agent named its own healthy rank as the cause (user trial 3
    # of issue 22). Node 1's fault came first, and node 0 says so.
    serve2 "dp$$" "$WORK/dp$$.pause"
    touch "$WORK/dp$$.pause"
    for _ in $(seq 300); do grep -q paused "$WORK/dp$$.t0" && break; sleep 0.1; done
    pkill -9 -P "$T1"
    sleep 1
    touch "$WORK/dp$$.pause.go"
    wait "$T0"
    wait "$SRV"
    check "serve, 2 nodes, a rank fails after another node's died: node 0 names that first" \
        contains "$WORK/dp$$.srv.err" \
        "node 1.*rank 1 (pid [0-9]*) died or disconnected.*then on this node: rank 0 (pid [0-9]*) failed.*RuntimeError: Connection closed by peer"
    # Ctrl-C on node 1's agent: every node stops after the same step, and node 0's trainer
    # was told "the agent was stopped (Ctrl-C...)" though its agent was not (a user's trial).
    serve2 "cc$$"
    for p in $(pgrep -f -- "^$DH serve --manifest $M --ranks 2"); do # node 1's agent
        tr '\0' '\n' < /proc/$p/environ 2> /dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" &&
            kill -INT "$p"
    done
    wait "$T0" "$T1"
    wait "$SRV"
    check "serve, 2 nodes, Ctrl-C on node 1's agent: node 0's trainer is told which node" \
        contains "$WORK/cc$$.t0" "DH_ECANCELED: node 1's agent was stopped (Ctrl-C"
    check "serve, 2 nodes, Ctrl-C on node 1's agent: node 0's agent says so" \
        contains "$WORK/cc$$.srv.err" "node 1's agent was stopped (Ctrl-C.*every node served [0-9]* steps, as far as any rank had gone, and stopped"
    check "serve, 2 nodes, Ctrl-C on node 1's agent: node 0 says it was interrupted too (it exited 0)" \
        contains "$WORK/cc$$.srv.err" "node 0 (.*): interrupted: node 1's agent was stopped"
    check "serve, 2 nodes, Ctrl-C on node 1's agent: node 1 says it was interrupted" \
        contains "$WORK/cc$$.srv.err" "node 1 (.*): interrupted (Ctrl-C or SIGTERM here): every node stopped after the same"
    # The stop is agreed at a step's exchange, when the trainers may hold one or two steps
    # more: the nodes then agree on the furthest step any rank took and serve it everywhere
    # (a rank asking just as the stop was applied was served on one node and refused on the
    # other: a trial, 3 Ctrl-Cs in 8), and the accounting covers every step both ranks took
    # (it stopped 2-3 short: a trial).
    took_0=$(grep -c took "$WORK/cc$$.t0")
    took_both=$(grep -c took "$WORK/cc$$.t1")
    check "serve, 2 nodes, Ctrl-C on node 1's agent: both ranks took the same steps ($took_0, $took_both)" \
        test "$took_0" = "$took_both"
    check "serve, 2 nodes, Ctrl-C on node 1's agent: the accounting covers the $took_both steps both ranks took" \
        contains "$WORK/cc$$.srv.out" "delivered [0-9]* + failed [0-9]* = $((4 * took_both)) "
    # A trainer started for 2 x 2 ranks against agents of 2 ranks in all: refused naming the
    # job's --ranks and this agent's share (it read "this agent serves 2 ranks", the whole
    # job's, when each served 1: a user's trial); the agents then stop at --attach-timeout
    # with no step, in one line each (a page of zeros followed "the accounting of the 0 steps").
    setsid timeout 120 "${MPIRUN[@]}" -np 2 "$DH" serve --manifest "$M" --ranks 2 --workers 2 \
        --batch 4 --steps 4 --attach-timeout 4 --socket "@dhmpi-%n-ws$$" \
        > "$WORK/ws$$.srv.out" 2> "$WORK/ws$$.srv.err" &
    SRV=$!
    PYTHONPATH=$PYP timeout 60 $PY -c '
import sys, time, datahelix
for _ in range(100):
    try:
        for b in datahelix.Loader(socket=sys.argv[1], rank=0, world_size=4):
            pass
    except datahelix.DataHelixError as e:
        if "no agent listened" in e.message and _ < 99:
            time.sleep(0.1); continue
        print(e.name, e.message)
    break' "@dhmpi-0-ws$$" > "$WORK/ws$$.t0" 2>&1
    wait "$SRV"
    check "serve, 2 nodes, a trainer of another world size: told the job's --ranks and its node's share" \
        contains "$WORK/ws$$.t0" "DH_EMISMATCH.*world size 4, but the job's agents were started with --ranks 2 (every node's ranks; this agent, node 0, serves ranks 0..0)"
    check "serve, 2 nodes, no step: one line, no page of zeros" \
        contains "$WORK/ws$$.srv.err" "node 0 (.*): the nodes completed no step together: nothing delivered"
    check "serve, 2 nodes, no step: ...no accounting of 0 steps" \
        not_contains "$WORK/ws$$.srv.err" "the accounting of the 0 steps"
    # 2 nodes x 2 ranks whose trainers read two epochs of an endless stream and leave
    # together: the job ended before its last step was exchanged, and the accounting said 7
    # steps where every rank took 8 (a user's validation stream).
    cat > "$WORK/lt.py" << 'PYEOF'
import os, sys, time, datahelix
rank, job, at = int(sys.argv[1]), sys.argv[2], sys.argv[3]
with datahelix.Loader(socket="@dhmpi-%d-%s" % (rank // 2, job), rank=rank, world_size=4) as L:
    n = sum(1 for ep in range(2) for b in L)
    open("%s/%s.done%d" % (at, job, rank), "w").close() # DDP's last collective: all leave
    while sum(os.path.exists("%s/%s.done%d" % (at, job, r)) for r in range(4)) < 4: # together
        time.sleep(0.01)
print("took", n, flush=True)
PYEOF
    setsid timeout 120 "${MPIRUN[@]}" -np 2 "$DH" serve --manifest "$M" --ranks 4 --workers 2 \
        --batch 6 --steps 0 --no-shuffle --keep-last --socket "@dhmpi-%n-tg$$" \
        > "$WORK/tg$$.srv.out" 2> "$WORK/tg$$.srv.err" &
    SRV=$!
    TG=()
    for r in 0 1 2 3; do
        PYTHONPATH=$PYP timeout 100 $PY "$WORK/lt.py" $r "tg$$" "$WORK" > "$WORK/tg$$.t$r" 2>&1 &
        TG+=($!)
    done
    wait "${TG[@]}" "$SRV"
    took=$(sed -n 's/^took //p' "$WORK/tg$$.t0")
    check "serve, 2 nodes x 2 ranks leaving together: the accounting covers the ${took:-?} steps every rank took" \
        contains "$WORK/tg$$.srv.out" "on 2 nodes, ${took:-none} steps,"
    # A rank given the wrong node's socket after that node's own rank attached: told at once
    # which node it belongs to (it heard nothing for 15 s, then "the agent said nothing").
    # Rank 1's Python starts with rank 0's and waits for the go file before it connects: its
    # start-up (seconds under load) is not inside node 1's --attach-timeout (CI once saw the
    # run end before rank 1 reached node 0's agent).
    cat > "$WORK/wn.py" << 'PYEOF'
import os, sys, time, datahelix
if len(sys.argv) > 3:
    while not os.path.exists(sys.argv[3]):
        time.sleep(0.05)
try:
    with datahelix.Loader(socket=sys.argv[2], rank=int(sys.argv[1]), world_size=2) as L:
        next(iter(L))
except datahelix.DataHelixError as e:
    print(e.name, e.message, flush=True)
PYEOF
    setsid timeout 60 "${MPIRUN[@]}" -np 2 "$DH" serve --manifest "$M" --ranks 2 --workers 2 \
        --batch 4 --steps 0 --attach-timeout 12 --socket "@dhmpi-%n-wn$$" > /dev/null \
        2> "$WORK/wn$$.srv.err" &
    SRV=$!
    PYTHONPATH=$PYP timeout 50 $PY "$WORK/wn.py" 0 "@dhmpi-0-wn$$" > "$WORK/wn$$.t0" 2>&1 &
    T0=$!
    PYTHONPATH=$PYP timeout 50 $PY "$WORK/wn.py" 1 "@dhmpi-0-wn$$" "$WORK/wn$$.go" \
        > "$WORK/wn$$.t1" 2>&1 &
    T1=$!
    for _ in $(seq 300); do
        grep -q "rank 0 attached" "$WORK/wn$$.srv.err" 2> /dev/null && break
        sleep 0.1
    done
    touch "$WORK/wn$$.go"
    wait "$T1"
    wait "$T0" "$SRV"
    check "serve, 2 nodes: a node stopped before the run began: no node died, none says so" \
        not_contains "$WORK/wn$$.srv.err" "one in flight when a node died"
    check "serve, 2 nodes: a rank at the wrong node's agent, its own rank in, is told its node" \
        contains "$WORK/wn$$.t1" "DH_EMISMATCH rank 1 belongs to node 1; this agent is node 0"
    # One node's trainers start 17 s after the other's (a checkpoint loading): the early ones
    # wait with their agent, which waits for the other node (they gave up after 15 s of its
    # silence, and the agent then named them as leaving: a user's trial of issue 25).
    setsid timeout 120 "${MPIRUN[@]}" -np 2 "$DH" serve --manifest "$M" --ranks 2 --workers 2 \
        --batch 4 --steps 4 --socket "@dhmpi-%n-lt$$" > "$WORK/lt$$.srv.out" \
        2> "$WORK/lt$$.srv.err" &
    SRV=$!
    PYTHONPATH=$PYP timeout 100 $PY "$WORK/trainer.py" 0 "lt$$" > "$WORK/lt$$.t0" 2>&1 &
    T0=$!
    sleep 17
    PYTHONPATH=$PYP timeout 100 $PY "$WORK/trainer.py" 1 "lt$$" > "$WORK/lt$$.t1" 2>&1
    wait "$T0"
    wait "$SRV"
    check "serve, 2 nodes, one node's trainers 17 s late: the other's waited and trained" \
        contains "$WORK/lt$$.t0" "^done"
    check "serve, 2 nodes, one node's trainers 17 s late: ...and so did theirs" \
        contains "$WORK/lt$$.t1" "^done"
    check "serve, 2 nodes, one node's trainers 17 s late: the agent said what it waits for" \
        contains "$WORK/lt$$.srv.err" "waiting for the other nodes' ranks"
    # A trainer keeps a tensor of step 0 (a debug print did) and lets go of each epoch's
    # last batch before the next epoch (`del b`): the step exchange waited for step 0's
    # release, the next epoch's first step for the nodes' plan, and every rank stopped there
    # until its 60-s timeout (a user's trial of issue 25). 2 epochs of 3 steps.
    cat > "$WORK/keeper.py" << 'PYEOF'
import sys, datahelix
rank, job = int(sys.argv[1]), sys.argv[2]
kept = None
with datahelix.Loader(socket="@dhmpi-%d-%s" % (rank // 2, job), rank=rank, world_size=4) as L:
    for ep in range(L.epoch, L.epochs):
        L.set_epoch(ep)
        for b in L:
            if rank == 0 and b["step"] == 0:
                kept = b["video"]
        del b
        print("epoch", ep, flush=True)
print("done", flush=True)
PYEOF
    setsid timeout 120 "${MPIRUN[@]}" -np 2 "$DH" serve --manifest "$M" --ranks 4 --workers 2 \
        --batch 8 --epochs 2 --socket "@dhmpi-%n-kp$$" > "$WORK/kp$$.srv.out" \
        2> "$WORK/kp$$.srv.err" &
    SRV=$!
    for r in 0 1 2 3; do
        PYTHONPATH=$PYP timeout 100 $PY "$WORK/keeper.py" $r "kp$$" > "$WORK/kp$$.t$r" 2>&1 &
        eval "K$r=\$!"
    done
    wait "$K0" "$K1" "$K2" "$K3"
    wait "$SRV"
    check "serve, 2 nodes, a trainer keeps step 0's tensor: every rank trains both epochs" \
        test "$(cat "$WORK"/kp$$.t[0-3] | grep -c '^done')" -eq 4
    check "serve, 2 nodes, a trainer keeps step 0's tensor: every sample delivered" \
        contains "$WORK/kp$$.srv.out" "delivered [0-9]* + failed [0-9]* = 48"
    [[ $fail -eq 0 ]] || tail -n 5 "$WORK"/tr$$.* "$WORK"/nd$$.* "$WORK"/dp$$.* "$WORK"/lt$$.* \
        "$WORK"/kp$$.* "$WORK"/cc$$.* "$WORK"/wn$$.*
else
    echo "skip: no Python package or numpy here (serve on 2 nodes)"
fi

echo "mpi_run: $pass passed, $fail failed"
test $fail -eq 0
