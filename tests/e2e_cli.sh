#!/usr/bin/env bash
# e2e_cli.sh - end-to-end tests of the datahelix CLI on real media generated
# here with the ffmpeg command-line tool. Each case is a command plus what
# its output, exit status and files must show.
#   usage: e2e_cli.sh PATH/TO/datahelix
set -u
DH=${1:?usage: e2e_cli.sh PATH/TO/datahelix}
DH=$(cd "$(dirname "$DH")" && pwd)/$(basename "$DH") # absolute: some cases run elsewhere
FFMPEG=${DH_FFMPEG:-ffmpeg}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dhe2e.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
source "$(dirname "$0")/lib.sh"
json_field() { # json_field FILE KEY -> prints the value (flat numeric keys only)
    sed -n "s/.*\"$2\":\([0-9.e+-]*\).*/\1/p" "$1" | head -n 1
}

# ---- media: a small corpus with one of each kind, plus junk ----
mkdir -p "$WORK/data/clips" "$WORK/data/img" "$WORK/data/audio"
ff() { "$FFMPEG" -v error -y -nostdin "$@"; }
sigint_after() { # sigint_after SECONDS OUT ERR CMD... -> CMD's exit status after a SIGINT
    local secs=$1 out=$2 err=$3 pid
    shift 3
    "$@" > "$out" 2> "$err" &
    pid=$!
    sleep "$secs"
    kill -INT $pid
    wait $pid
}
ff -f lavfi -i testsrc=size=320x240:rate=25 -t 2 -c:v libx264 -g 10 -bf 2 -pix_fmt yuv420p "$WORK/data/clips/a.mp4"
ff -f lavfi -i testsrc=size=160x120:rate=30 -t 1 -c:v libx264 -g 15 -pix_fmt yuv420p "$WORK/data/clips/b.mkv"
ff -f lavfi -i testsrc=size=640x360 -frames:v 1 "$WORK/data/img/c.jpg"
ff -f lavfi -i testsrc=size=200x100 -frames:v 1 "$WORK/data/img/d.png"
ff -f lavfi -i sine=sample_rate=16000 -t 2 "$WORK/data/audio/e.flac"
echo "not media" > "$WORK/data/readme.txt"
# A link to a file inside DIR is indexed under its own name (a hidden blob cache is not
# walked itself); a link that leaves DIR is skipped (a run could not open it either, and
# must not: containment is the kernel's RESOLVE_BENEATH); a link to a directory is not
# followed.
mkdir -p "$WORK/data/.blobs" "$WORK/blobs"
cp "$WORK/data/img/d.png" "$WORK/data/.blobs/blob1"
cp "$WORK/data/img/d.png" "$WORK/blobs/blob2"
ln -s ../.blobs/blob1 "$WORK/data/img/linked.png"
ln -s "$WORK/blobs/blob2" "$WORK/data/img/outside.png"
ln -s "$WORK/data" "$WORK/data/loop"
head -c 500 "$WORK/data/clips/a.mp4" > "$WORK/data/clips/broken.mp4"

# ---- index ----
"$DH" index "$WORK/data" -o "$WORK/data/manifest.jsonl" -j 2 > "$WORK/index.out" 2> "$WORK/index.err"
rc=$?
check "index exits 0 with skips" test $rc -eq 0
check "index summary accounts for every file" contains "$WORK/index.out" "9 files: 6 probed + 3 skipped"
check "index skips a link that leaves DIR, saying so" contains "$WORK/index.err" \
    "img/outside.png: skipped: resolves outside the manifest's directory"
check "index says which file was scanned" contains "$WORK/index.out" "1 without a container frame index"
check "index names the skipped text file" contains "$WORK/index.err" "readme.txt: skipped:"
check "index names the broken video" contains "$WORK/index.err" "clips/broken.mp4: skipped:"
check "manifest has one line per probed file" test "$(wc -l < "$WORK/data/manifest.jsonl")" -eq 6
check "a symlinked file is indexed under the link's path" contains "$WORK/data/manifest.jsonl" '"id":"img/linked.png"'
check "a symlinked directory is not followed" test "$(grep -c '"id":"loop/' "$WORK/data/manifest.jsonl")" -eq 0
check "manifest records keyframes" contains "$WORK/data/manifest.jsonl" '"keyframes":\[0,10,20,30,40\]'

"$DH" index "$WORK/data" -o "$WORK/data/m2.jsonl" --on-error fail > /dev/null 2>&1
check "index --on-error fail exits 1 when files were skipped" test $? -eq 1

"$DH" index "$WORK/data/clips" -o "$WORK/elsewhere/m.jsonl" > /dev/null 2> "$WORK/outside.err"
check "index refuses a manifest outside DIR's tree" test $? -ne 0
"$DH" index "$WORK/data/clips" -o "$WORK/m-parent.jsonl" -q > /dev/null 2>&1
check "index accepts a manifest in a parent directory" contains "$WORK/m-parent.jsonl" '"path":"data/clips/a.mp4"'

# ---- inspect ----
"$DH" inspect "$WORK/data/manifest.jsonl" --workload kinetics-clips --check-files \
    --json "$WORK/inspect.json" > "$WORK/inspect.out" 2> "$WORK/inspect.err"
check "inspect exits 0" test $? -eq 0
check "inspect counts lines" contains "$WORK/inspect.out" "6 lines: 6 loaded + 0 skipped"
check "inspect shows codecs" contains "$WORK/inspect.out" "h264 2"
check "inspect json: loaded" test "$(json_field "$WORK/inspect.json" loaded)" = 6
# kinetics-clips samples 16 frames; a.mp4 has 50 frames, b.mkv 30 -> both 16.
check "inspect json: sampled frames" contains "$WORK/inspect.json" '"video_sampled_frames":{"n":2,"min":16,'

# Bad manifest lines: skip mode goes on, fail mode stops; both name file and line.
cp "$WORK/data/manifest.jsonl" "$WORK/data/bad.jsonl"
n=$(wc -l < "$WORK/data/bad.jsonl")   # the bad lines below are n+1 .. n+5
{
    echo '{"id":"x","media":[{"type":"video","path":"../../etc/passwd","width":2,"height":2,"frames":2,"fps":1}]}'
    echo '{"id":"clips/a.mp4","text_tokens":1}'
    echo '{not json'
    echo '{"id":"big","media":[{"type":"image","path":"img/c.jpg","width":100000,"height":100000}]}'
    echo '{"id":"gone","media":[{"type":"image","path":"img/gone.jpg","width":2,"height":2}]}'
} >> "$WORK/data/bad.jsonl"
"$DH" inspect "$WORK/data/bad.jsonl" --check-files > "$WORK/bad.out" 2> "$WORK/bad.err"
check "inspect skip mode exits 0" test $? -eq 0
check "inspect accounting: loaded + skipped = lines" contains "$WORK/bad.out" "11 lines: 6 loaded + 5 skipped"
check "path escape reported with line" contains "$WORK/bad.err" "bad.jsonl:$((n + 1)): sample \"x\": media\[0\].path \"../../etc/passwd\" escapes"
check "duplicate id reported" contains "$WORK/bad.err" "bad.jsonl:$((n + 2)): .*DH_EDUP"
check "malformed JSON reported" contains "$WORK/bad.err" "bad.jsonl:$((n + 3)): malformed JSON"
check "limit reported" contains "$WORK/bad.err" "bad.jsonl:$((n + 4)): .*over the limit.*DH_ELIMIT"
check "missing file reported" contains "$WORK/bad.err" "bad.jsonl:$((n + 5)): .*file not found"
"$DH" inspect "$WORK/data/bad.jsonl" --on-error fail > /dev/null 2> "$WORK/fail.err"
check "inspect fail mode exits 1" test $? -eq 1
check "fail mode stops at the first bad line" test "$(grep -c 'bad.jsonl:[0-9]' "$WORK/fail.err")" -eq 1
"$DH" inspect "$WORK/data/manifest.jsonl" --max-pixels 1000 > "$WORK/lim.out" 2>&1
# Only the audio file has no pixels to exceed the limit.
check "limits are configurable from the CLI" contains "$WORK/lim.out" "6 lines: 1 loaded + 5 skipped"

# ---- sim and bench (simulated figures) ----
"$DH" sim --workload laion-images --policy helix --steps 5 --json "$WORK/sim.json" \
    --trace "$WORK/trace.json" > "$WORK/sim.out" 2>&1
check "sim exits 0" test $? -eq 0
check "sim says its figures are simulated" contains "$WORK/sim.out" "simulated"
check "sim json carries the contract keys" contains "$WORK/sim.json" '"efficiency":.*"gpu_idle_frac":'
check "sim accounts for every sample" contains "$WORK/sim.out" "delivered 1280 + failed 0 = 1280"
check "sim writes a trace" contains "$WORK/trace.json" '"name":"prepare"'
# A dataset smaller than the run: epochs go round it (long runs at many ranks, issue 25).
"$DH" sim --workload laion-images --policy helix --steps 12 --workload-samples 512 \
    --json "$WORK/simws.json" > "$WORK/simws.out" 2>&1
check "sim --workload-samples runs 12 steps over a dataset of 2 batches" \
    contains "$WORK/simws.out" "delivered 3072 + failed 0 = 3072"
check "sim json splits the setup out of wall_s" contains "$WORK/simws.json" '"setup_s":[0-9]'
"$DH" sim --workload laion-images --workload-samples 0 > /dev/null 2> "$WORK/simws.err"
check "--workload-samples 0 is refused, named" contains "$WORK/simws.err" "workload-samples"
"$DH" sim --manifest "$WORK/data/manifest.jsonl" --workload-samples 10 --ranks 1 --workers 1 \
    --batch 1 > /dev/null 2> "$WORK/simwsm.err"
check "--workload-samples on a manifest run is refused" contains "$WORK/simwsm.err" \
    "a manifest run reads its manifest"
# A configuration the library refuses is a usage error, as the README says (it exited 1).
"$DH" sim --workload omni-mix --policy helix --ranks 8 --batch 4 > /dev/null 2> "$WORK/simcfg.err"
check "a global batch below the ranks is a usage error (exit 2)" test $? -eq 2
check "... naming both numbers" contains "$WORK/simcfg.err" "--batch 4 is below --ranks 8"
# Text costs nothing in the simulator: no efficiency to read (it printed 0), and "1 step".
printf '{"id":"a","text_tokens":10}\n{"id":"b","text_tokens":12}\n' > "$WORK/text.jsonl"
"$DH" sim --manifest "$WORK/text.jsonl" --policy helix --ranks 2 --workers 1 --batch 2 \
    --steps 1 > "$WORK/text.out" 2>&1
check "a text-only simulation exits 0" test $? -eq 0
check "... says its efficiency is n/a" contains "$WORK/text.out" "efficiency n/a"
check "... in one step" contains "$WORK/text.out" "R=2 W=1, 1 step, 2 samples"
# More usage errors a user's trial met (they exited 1, or were accepted silently).
"$DH" sim --workload nope --policy helix > /dev/null 2> "$WORK/simwl.err"
check "an unknown workload is a usage error (exit 2)" test $? -eq 2
check "... listing the built-ins" contains "$WORK/simwl.err" "t2v-diffusion"
"$DH" sim --workload omni-mix --policy helix --epochs 2 --steps 10 > /dev/null 2> "$WORK/se.err"
check "--steps with --epochs is a usage error" test $? -eq 2
check "... saying so" contains "$WORK/se.err" "give --steps N or --epochs N, not both"
"$DH" serve --manifest "$WORK/text.jsonl" --ranks 4 --workers 2 --batch 2 > /dev/null \
    2> "$WORK/servebatch.err"
check "serve --batch below --ranks is a usage error" test $? -eq 2
check "... naming both" contains "$WORK/servebatch.err" "--batch 2 is below --ranks 4"
"$DH" sim --workload native-res-video --policy helix --ranks 64 > /dev/null 2> "$WORK/defb.err"
check "a default batch below the ranks says it is the default" contains "$WORK/defb.err" \
    "the default global batch is too small, --batch sets it"
# Ctrl-C while a large dataset is generated: it stops there (it went on to the end before).
sigint_after 1 /dev/null "$WORK/simint.err" \
    "$DH" sim --workload omni-mix --workload-samples 5000000 --steps 2
check "Ctrl-C while a workload is generated exits 130 at once" test $? -eq 130
check "... saying where it stopped" contains "$WORK/simint.err" "generating omni-mix (5000000 samples): stopped"
# The indexed real corpus, as a manifest run (default spec, generic GPU model).
"$DH" sim --manifest "$WORK/data/manifest.jsonl" --policy pool --ranks 2 --workers 2 --batch 2 \
    > "$WORK/sim2.out" 2>&1
check "sim runs a manifest" contains "$WORK/sim2.out" "3 steps, 6 samples"
"$DH" bench --mode sim --workloads kinetics-clips,speech-asr --steps 5 --json "$WORK/bench.json" \
    > "$WORK/bench.out" 2>&1
check "bench exits 0" test $? -eq 0
check "bench json has runs and the summary" contains "$WORK/bench.json" '"summary":{"min_efficiency":.*"headroom_vs_pool"'
check "bench prints the table" contains "$WORK/bench.out" "speech-asr.*helix"
"$DH" bench --mode real --workloads speech-asr --policies pool,helix --steps 2 --batch 4 \
    --repeats 1 --run-seconds 0 --data "$WORK/bd" --json "$WORK/breal.json" > "$WORK/breal.out" 2>&1
check "bench --mode real exits 0" test $? -eq 0
check "bench --mode real calibrates on this machine" contains "$WORK/breal.out" "CPU cost on this machine"
check "bench --mode real saves runs and the simulator's predictions" contains "$WORK/breal.json" '"engine":"real".*'
check "bench --mode real json has sim_predictions" contains "$WORK/breal.json" '"sim_predictions"'
"$DH" bench --mode real --workloads speech-asr --policies pool,helix --steps 2 --batch 4 \
    --repeats 2 --run-seconds 0.3 --data "$WORK/bd" > "$WORK/brep.out" 2>&1
check "bench --run-seconds picks the steps from the simulator" contains "$WORK/brep.out" \
    "speech-asr: [0-9]* steps per run (about 0.3 s each, simulated)"
check "bench --repeats prints medians, ranges and a verdict" contains "$WORK/brep.out" \
    "median .* range .*\(best\|within noise\|beyond the noise\)"
check "every repeat is a row" test "$(grep -c '^speech-asr  *\(pool\|helix\)' "$WORK/brep.out")" -eq 4
# Random augmentation (issue 23): a spec's random keys on the real corpus, --augment in the
# simulator, and a mistaken key named.
cat > "$WORK/aug.json" <<'JSON'
{"base": "kinetics-clips", "video": {"clip_s": 0.5, "random_start": true, "fps_jitter": 0.2,
 "flip": 0.5, "resize": {"mode": "random_resized_crop", "size": 64}},
 "image": {"flip": 0.5, "resize": {"mode": "random_crop", "size": 32, "short_side": [40, 60]}}}
JSON
"$DH" run --manifest "$WORK/data/manifest.jsonl" --spec "$WORK/aug.json" --policy helix \
    --ranks 2 --workers 2 --batch 2 --epochs 2 --json "$WORK/aug.run.json" > "$WORK/aug.out" 2>&1
check "an augmented real run exits 0" test $? -eq 0
check "an augmented real run accounts for every sample" contains "$WORK/aug.out" \
    "delivered 12 + failed 0 = 12"
"$DH" sim --workload kinetics-clips --policy helix --steps 20 --augment > "$WORK/saug.out" 2>&1
check "sim --augment runs" contains "$WORK/saug.out" "delivered 1280 + failed 0 = 1280"
"$DH" inspect "$WORK/data/manifest.jsonl" --spec "$WORK/aug.json" > "$WORK/iaug.out" 2>&1
check "inspect says which random augmentation is on" contains "$WORK/iaug.out" \
    "random augmentation: video: a 0.5 s clip at a random start, fps jitter 0.2, random_resized_crop 64x64"
"$DH" inspect "$WORK/data/manifest.jsonl" --augment > "$WORK/iaug2.out" 2>&1
check "inspect --augment shows the standard augmentation" contains "$WORK/iaug2.out" \
    "spec: default + --augment"
echo '{"video": {"clip_s": 1, "random_start": true}}' > "$WORK/start.json"
"$DH" inspect "$WORK/data/manifest.jsonl" --spec "$WORK/start.json" > "$WORK/iaug3.out" 2>&1
check "inspect names only the random keys a spec has" contains "$WORK/iaug3.out" \
    "random augmentation: video: a 1 s clip at a random start$"
"$DH" gen --workload laion-images --out "$WORK/g" --augment > /dev/null 2> "$WORK/gen.err"
check "gen names an unknown option as unknown" contains "$WORK/gen.err" \
    'gen: unexpected argument "--augment"'
# a mistyped option is named with the nearest one (a user's trial typed --epoch); an option
# near none is named alone
rc=0; "$DH" serve --manifest "$WORK/data/manifest.jsonl" --epoch 2 2> "$WORK/typo.err" || rc=$?
check "a mistyped option: a usage error" test "$rc" -eq 2
check "a mistyped option: the nearest named" contains "$WORK/typo.err" \
    'serve: unexpected argument "--epoch" (did you mean --epochs? see datahelix serve --help)'
"$DH" sim --workload omni-mix --stpes 3 2> "$WORK/typo2.err" || true
check "a mistyped option: two letters swapped" contains "$WORK/typo2.err" "did you mean --steps?"
# another loader's name is named with ours and what it means (a user trial typed
# --batch-size, which no edit distance reaches)
rc=0; "$DH" run --manifest "$WORK/data/manifest.jsonl" --batch-size 8 2> "$WORK/typo4.err" || rc=$?
check "another loader's option name: a usage error" test "$rc" -eq 2
check "another loader's option name: ours named, and what it means" contains "$WORK/typo4.err" \
    'run: unexpected argument "--batch-size" (did you mean --batch? the global batch, every rank'
"$DH" sim --workload omni-mix --num_workers=4 2> "$WORK/typo5.err" || true
check "another loader's option name, with =: ours named" contains "$WORK/typo5.err" \
    'did you mean --workers? decoding threads'
"$DH" index --frobnicate 2> "$WORK/typo3.err" || true
check "an option near none: no guess" contains "$WORK/typo3.err" \
    'index: unexpected argument "--frobnicate" (see datahelix index --help)'
echo '{"video": {"random_start": true}}' > "$WORK/badaug.json"
"$DH" run --manifest "$WORK/data/manifest.jsonl" --spec "$WORK/badaug.json" --ranks 2 \
    --workers 2 --batch 2 > /dev/null 2> "$WORK/badaug.err"
check "a random key without its clip is refused, named" contains "$WORK/badaug.err" \
    "video: random_start needs clip_s"
# Several processes under mpirun: tests/mpi_run.sh (a real launcher; faking its variables
# would leave MPI_Init waiting for a launcher that is not there).
"$DH" bench --mode fast > /dev/null 2> "$WORK/mode.err"
check "bench needs a known mode" contains "$WORK/mode.err" "--mode sim or --mode real"
"$DH" sim --workload nope > /dev/null 2> "$WORK/nope.err"
check "an unknown workload is named" contains "$WORK/nope.err" 'unknown workload "nope"'
"$DH" sim --workload laion-images --policy ray > /dev/null 2> "$WORK/ray.err"
check "an unknown policy lists the valid ones" contains "$WORK/ray.err" "helix-nobalance"
check "the policy list names the ablation helix-noreb" contains "$WORK/ray.err" "helix-noreb"

# ---- run: the real engine on the indexed corpus (plus one broken entry) ----
cp "$WORK/data/manifest.jsonl" "$WORK/data/run.jsonl"
echo '{"id":"broken","media":[{"type":"video","path":"clips/broken.mp4","width":320,"height":240,"fps":25,"frames":50}]}' >> "$WORK/data/run.jsonl"
"$DH" run --manifest "$WORK/data/run.jsonl" --policy helix --ranks 2 --workers 2 --batch 7 \
    --steps 1 --json "$WORK/run.json" > "$WORK/run.out" 2> "$WORK/run.err"
check "run exits 0 with a failed sample" test $? -eq 0
check "run says its figures are measured" contains "$WORK/run.out" "measured on this machine"
check "run reports the broken sample with its path" contains "$WORK/run.err" 'sample "broken" (step .*clips/broken.mp4'
check "run accounts: delivered + failed = samples" contains "$WORK/run.out" "delivered 6 + failed 1 = 7"
check "run json says engine real" contains "$WORK/run.json" '"engine":"real"'
# Rebalancing on real decoding: half the samples truly 4x heavier than described.
"$DH" run --manifest "$WORK/data/manifest.jsonl" --policy helix --ranks 2 --workers 2 --batch 6 \
    --steps 3 --understate 0.5:4 --json "$WORK/reb.json" > "$WORK/reb.out" 2>&1
check "run with rebalancing exits 0" test $? -eq 0
check "run json counts refused moves" contains "$WORK/reb.json" '"reb_refused":'
check "run with rebalancing accounts for all" contains "$WORK/reb.out" "delivered 18 + failed 0 = 18"
# The stratified order: the simulator on 4 nodes of 2 ranks (each step laid out by node).
"$DH" sim --workload omni-mix --nodes 4 --ranks 8 --workers 16 --batch 64 --steps 12 \
    --order stratified --json "$WORK/strat.json" > "$WORK/strat.out" 2>&1
check "sim --order stratified on 4 nodes exits 0" test $? -eq 0
check "sim json says the order" contains "$WORK/strat.json" '"order":"stratified"'
check "sim's summary says the order" contains "$WORK/strat.out" "768 samples, stratified order"
check "sim --order stratified delivers every scheduled sample" \
    test "$(json_field "$WORK/strat.json" delivered)" = 768
"$DH" sim --workload omni-mix --steps 2 --json "$WORK/unif.json" > /dev/null 2>&1
check "sim json says the uniform order by default" contains "$WORK/unif.json" '"order":"uniform"'
"$DH" report "$WORK/strat.json" "$WORK/unif.json" -o "$WORK/orders.html" > /dev/null 2>&1
check "report draws a stratified run apart from a uniform one" \
    contains "$WORK/orders.html" "helix+stratified"
"$DH" sim --workload omni-mix --order random > /dev/null 2> "$WORK/order.err"
check "an unknown --order is a usage error naming the choices" \
    contains "$WORK/order.err" 'order expects uniform or stratified, got "random"'
"$DH" sim --workload omni-mix --nodes 3 --ranks 6 --workers 12 --batch 64 --order stratified \
    > /dev/null 2> "$WORK/order3.err"
check "--order stratified refuses a batch the nodes do not divide" \
    contains "$WORK/order3.err" "needs a global batch that is a multiple of them"
"$DH" run --manifest "$WORK/data/manifest.jsonl" --order stratified --keep-last \
    > /dev/null 2> "$WORK/orderkl.err"
check "--order stratified with --keep-last is a usage error" test $? -eq 2
check "--order stratified refuses --keep-last, naming it" \
    contains "$WORK/orderkl.err" "does not go with --keep-last"
"$DH" serve --manifest "$WORK/data/manifest.jsonl" --ranks 1 --batch 2 --order stratified \
    --stream val --manifest "$WORK/data/manifest.jsonl" --no-shuffle \
    > /dev/null 2> "$WORK/orderv.err"
check "a validation stream under --order stratified is a usage error" test $? -eq 2
check "a validation stream under --order stratified is told to add --order uniform" \
    contains "$WORK/orderv.err" "add --order uniform after --stream val"
"$DH" run --manifest "$WORK/data/manifest.jsonl" --nodes 2 > /dev/null 2> "$WORK/nodes.err"
check "the real engine refuses --nodes without mpirun" contains "$WORK/nodes.err" "mpirun"
"$DH" run --manifest "$WORK/data/manifest.jsonl" --move-gbps 0 > /dev/null 2>&1
check "a zero handoff bandwidth is a usage error" test $? -eq 2
"$DH" run --workload laion-images > /dev/null 2> "$WORK/runw.err"
check "run without a manifest is refused" contains "$WORK/runw.err" "run needs --manifest"

# Streaming: whole epochs, and a run without a length stopped by SIGINT with its accounting.
DH_PROGRESS_SECONDS=0.05 "$DH" run --manifest "$WORK/data/manifest.jsonl" --policy pool \
    --ranks 2 --workers 2 --batch 3 --epochs 3 --json "$WORK/ep.json" --quiet > "$WORK/ep.out" 2>&1
check "run --epochs 3 runs 3 epochs of 2 steps" test "$(json_field "$WORK/ep.json" steps)" = 6
check "run --quiet shows no progress" not_contains "$WORK/ep.out" "steps after"
DH_PROGRESS_SECONDS=abc "$DH" version > /dev/null 2> "$WORK/penv.err"
check "a DH_PROGRESS_SECONDS that is no number: said" contains "$WORK/penv.err" \
    'DH_PROGRESS_SECONDS="abc" is not a number of seconds' 
sigint_after 3 "$WORK/forever.out" "$WORK/forever.err" env DH_PROGRESS_SECONDS=0.5 "$DH" run \
    --manifest "$WORK/data/manifest.jsonl" --policy helix --ranks 2 --workers 2 --batch 3 \
    --steps 0 --json "$WORK/forever.json"
check "an endless run stopped by SIGINT exits 130 (128 + SIGINT), not by itself" test $? -eq 130
check "an interrupted run says what it covers" contains "$WORK/forever.err" "interrupted"
check "a run's progress, not on a terminal: plain lines now and then" \
    grep -Eq '^datahelix: run: [0-9]+ steps after [0-9.]+ s$' "$WORK/forever.err"
steps=$(json_field "$WORK/forever.json" steps)
check "an interrupted run went past one epoch" test "${steps:-0}" -gt 2
check "an interrupted run accounts for every sample of its steps" \
    contains "$WORK/forever.out" "delivered $((steps * 3)) + failed 0 = $((steps * 3))"
"$DH" sim --workload speech-asr --epochs 2 > "$WORK/simep.out" 2>&1
check "sim --epochs 2 of a 200-step workload runs 400 steps" contains "$WORK/simep.out" "400 steps"

# Hostile files under a run (issue 12): a FIFO and a link leaving the manifest's directory
# in place of images, next to a good one. Each fails with its own reason; nothing blocks.
mkdir -p "$WORK/hostile/img"
cp "$WORK/data/img/d.png" "$WORK/hostile/img/good.png"
mkfifo "$WORK/hostile/img/fifo.png"
ln -s "$WORK/blobs/blob2" "$WORK/hostile/img/away.png"
good=$(grep '"path":"img/d.png"' "$WORK/data/manifest.jsonl")
for name in good fifo away; do
    sed "s|\"id\":\"img/d.png\"|\"id\":\"$name\"|; s|\"path\":\"img/d.png\"|\"path\":\"img/$name.png\"|" \
        <<< "$good"
done > "$WORK/hostile/m.jsonl"
timeout 60 "$DH" run --manifest "$WORK/hostile/m.jsonl" --policy pool --ranks 1 --workers 2 \
    --batch 3 --steps 1 > "$WORK/hostile.out" 2> "$WORK/hostile.err"
check "a run over a FIFO and an escaping link ends (no hang)" test $? -eq 0
check "the FIFO fails with its reason" contains "$WORK/hostile.err" 'sample "fifo".*a FIFO, not a regular file'
check "the escaping link fails with its reason" \
    contains "$WORK/hostile.err" "sample \"away\".*resolves outside the manifest's directory"
check "hostile files: delivered + failed = scheduled" contains "$WORK/hostile.out" \
    "delivered 1 + failed 2 = 3"
"$DH" sim --workload kinetics-clips --understate 1:inf --steps 2 > /dev/null 2> "$WORK/inf.err"
check "an infinite stress factor is refused" contains "$WORK/inf.err" "0 < K <= 1000"
"$DH" run --manifest "$WORK/hostile/m.jsonl" --sample-timeout nan > /dev/null 2> "$WORK/nan.err"
check "a NaN sample timeout is refused" contains "$WORK/nan.err" "--sample-timeout expects a number"

# A split sample whose parts all fail is reported once (issue 12 #12): a 30-keyframe 1080p
# clip, far heavier than its step, is split over both workers; its file is missing.
kf=$(seq -s, 0 30 870)
echo "{\"id\":\"long\",\"media\":[{\"type\":\"video\",\"path\":\"missing.mp4\",\"width\":1920,\"height\":1080,\"fps\":30,\"frames\":900,\"keyframes\":[$kf]}]}" \
    > "$WORK/split.jsonl"
"$DH" run --manifest "$WORK/split.jsonl" --workload native-res-video --policy helix --ranks 1 \
    --workers 2 --batch 1 --steps 1 > "$WORK/split.out" 2> "$WORK/split.err"
check "a failed split sample is reported once" test "$(grep -c 'sample "long"' "$WORK/split.err")" -eq 1
check "a failed split sample is counted once" contains "$WORK/split.out" "delivered 0 + failed 1 = 1"

# An unwritable --json is found before the run, not after it (issue 12 #12).
"$DH" run --manifest "$WORK/split.jsonl" --workload native-res-video --ranks 1 --workers 1 \
    --batch 1 --steps 1 --json "$WORK/no/such/dir/r.json" > "$WORK/nojson.out" 2> "$WORK/nojson.err"
check "an unwritable --json fails" test $? -eq 1
check "an unwritable --json is named" contains "$WORK/nojson.err" "cannot write .*r.json"
check "an unwritable --json stops before the run" test "$(grep -c delivered "$WORK/nojson.out")" -eq 0

# A video with one frame and no frame rate or duration (found by fuzz_media) is skipped by
# index; before, index wrote a line that its own loader refused.
mkdir -p "$WORK/norate"
cp "$(dirname "$0")/../fuzz/corpus/media/crash-1frame-0fps.bin" "$WORK/norate/x.bin"
"$DH" index "$WORK/norate" -o "$WORK/norate/m.jsonl" > /dev/null 2> "$WORK/norate.err"
check "a video without a usable rate is skipped by index" contains "$WORK/norate.err" \
    "x.bin: skipped: video has 1 frames but no usable frame rate or duration"

# Diagnostics are capped: 30 bad lines print 20 in full and a count of the rest.
for i in $(seq 30); do echo "not json $i"; done > "$WORK/junk.jsonl"
"$DH" inspect "$WORK/junk.jsonl" > /dev/null 2> "$WORK/junk.err"
check "the first 20 errors are shown in full" test "$(grep -c 'junk.jsonl:[0-9]*: malformed' "$WORK/junk.err")" -eq 20
check "the rest are counted per reason" contains "$WORK/junk.err" "10 more errors not shown: DH_EPARSE 10"
DH_MAX_ERRORS=0 "$DH" inspect "$WORK/junk.jsonl" > /dev/null 2> "$WORK/junk-all.err"
check "DH_MAX_ERRORS=0 shows all" test "$(grep -c 'malformed' "$WORK/junk-all.err")" -eq 30

# serve: a pool that cannot fit fails at once, naming the size; Ctrl-C while waiting for
# ranks stops the agent cleanly.
"$DH" serve --manifest "$WORK/data/manifest.jsonl" --ranks 1 --batch 2 --socket "@dhe2e-$$" \
    --memory-budget 100000000000000 > /dev/null 2> "$WORK/serve-big.err"
check "serve refuses a pool larger than memory, naming the size" \
    contains "$WORK/serve-big.err" "the batch pool needs .* MiB of shared memory"
"$DH" serve --manifest "$WORK/data/manifest.jsonl" --ranks 1 --batch 100000 \
    --socket "@dhe2e-few-$$" > /dev/null 2> "$WORK/serve-few.err"
check "serve refuses a global batch larger than the manifest, at once" \
    contains "$WORK/serve-few.err" "samples cannot make an epoch of global batches of 100000"
"$DH" serve --manifest "$WORK/data/manifest.jsonl" --ranks 2 --batch 2 --socket "@dhe2e-$$" \
    > /dev/null 2> "$WORK/serve-int.err" &
pid=$!
sleep 1
kill -INT $pid
wait $pid
check "an interrupted agent says how far the attach got" contains "$WORK/serve-int.err" \
    "stopped (Ctrl-C, SIGTERM or its caller) with 0 of 2 ranks attached"
check "an interrupted agent had said where it listens" contains "$WORK/serve-int.err" \
    "listening on @dhe2e-"

# serve inside a memory cgroup (issue 22 #8): a v1 limit was ignored and the agent that
# reserved more than its group allows was OOM-killed without a word. As root where a
# memory group can be made (v1 or v2); skipped elsewhere.
cg=""
if [[ $(id -u) == 0 && -w /sys/fs/cgroup/memory ]]; then
    cg=/sys/fs/cgroup/memory/dhe2e-$$
    mkdir "$cg" 2> /dev/null && echo $((64 << 20)) > "$cg/memory.limit_in_bytes" || cg=""
elif [[ $(id -u) == 0 && -f /sys/fs/cgroup/cgroup.controllers ]] &&
     grep -qw memory /sys/fs/cgroup/cgroup.subtree_control 2> /dev/null; then
    cg=/sys/fs/cgroup/dhe2e-$$
    mkdir "$cg" 2> /dev/null && echo $((64 << 20)) > "$cg/memory.max" || cg=""
fi
# serve waiting for its ranks says so now and then (a log's heartbeat); --quiet does not
for q in "" -q; do
    DH_PROGRESS_SECONDS=0.3 timeout 30 "$DH" serve --manifest "$WORK/data/manifest.jsonl" \
        --ranks 2 --workers 2 --batch 2 --socket "@dhe2e-wait-$$" --attach-timeout 2 $q \
        > /dev/null 2> "$WORK/wait$q.err"
done
check "serve waiting for ranks: progress lines" \
    grep -q "serve: waiting for ranks: 0 of 2 attached, [0-9]* s left" "$WORK/wait.err"
check "serve -q waiting for ranks: none" not_contains "$WORK/wait-q.err" "waiting for ranks"
check "serve -q: the timeout still said" contains "$WORK/wait-q.err" "attached in time"
check "serve timed out before any step: one line, not a page of zeros" contains \
    "$WORK/wait-q.err" "no step was completed: nothing delivered, nothing to account"
check "serve timed out before any step: no empty accounting" not_contains "$WORK/wait-q.err" \
    "delivered 0 + failed 0"
# the same with two streams (a user's trial: a page of zeros for each)
timeout 30 "$DH" serve --manifest "$WORK/data/manifest.jsonl" --ranks 2 --workers 2 --batch 2 \
    --socket "@dhe2e-wait2-$$" --attach-timeout 2 -q --stream val \
    --manifest "$WORK/data/manifest.jsonl" --batch 2 > "$WORK/wait2.out" 2> "$WORK/wait2.err"
check "serve, 2 streams, timed out before any step: each stream says so in one line" \
    test "$(grep -c 'nothing delivered, nothing to account' "$WORK/wait2.out")" -eq 2
check "serve, 2 streams, timed out before any step: no empty accounting" not_contains \
    "$WORK/wait2.out" "delivered 0 + failed 0"
if [[ -n $cg ]]; then
    (echo $BASHPID > "$cg/cgroup.procs" && exec "$DH" serve --manifest \
        "$WORK/data/manifest.jsonl" --ranks 1 --batch 2 --socket "@dhe2e-cg-$$" \
        --memory-budget $((128 << 20)) --attach-timeout 2) > /dev/null 2> "$WORK/serve-cg.err"
    rc=$?
    check "serve in a 64 MiB memory cgroup refuses a 128 MiB pool with a sentence (rc $rc)" \
        contains "$WORK/serve-cg.err" "MiB of shared memory but .* MiB are available"
    rmdir "$cg" 2> /dev/null
else
    echo "skip: no memory cgroup can be made here (serve's cgroup limit case)"
fi

# bench --repeats: interleaved repeats, medians and ranges, a noise verdict; every run kept.
"$DH" bench --mode sim --workloads kinetics-clips --steps 20 --repeats 2 \
    --json "$WORK/rep.json" > "$WORK/rep.out" 2>&1
check "bench --repeats prints each policy's median and range" \
    test "$(grep -c 'median .* samples/s  range' "$WORK/rep.out")" -eq 3
check "bench --repeats names the best policy" contains "$WORK/rep.out" "  best"
check "bench --repeats keeps every run in the JSON" \
    test "$(grep -o '"policy":' "$WORK/rep.json" | wc -l)" -eq 6
"$DH" bench --mode sim --repeats 0 > /dev/null 2> "$WORK/rep0.err"
check "bench --repeats 0 is a usage error" test $? -eq 2

# Interrupted work leaves nothing a later command trusts (issue 12 #11).
"$DH" bench --mode sim --steps 2000 --json "$WORK/bench-int.json" > "$WORK/bench-int.out" 2>&1 &
pid=$!
sleep 1
kill -INT $pid
wait $pid
check "an interrupted bench exits 130" test $? -eq 130
check "an interrupted bench leaves no JSON" test ! -e "$WORK/bench-int.json"
check "an interrupted bench leaves no temporary file" \
    test -z "$(ls "$WORK" | grep 'bench-int.json.tmp')"
# (SIGTERM: a background job of a script ignores SIGINT, and gen installs no handler)
"$DH" gen --workload kinetics-clips --out "$WORK/gen-int" --samples 64 > /dev/null 2>&1 &
pid=$!
sleep 1
kill -TERM $pid
wait $pid
check "a gen killed mid-way leaves no manifest" test ! -e "$WORK/gen-int/manifest.jsonl"

# ---- gen + run on a generated workload ----
"$DH" gen --workload speech-asr --out "$WORK/gen" --samples 8 > "$WORK/gen.out" 2>&1
check "gen writes samples and a manifest" contains "$WORK/gen.out" "8 samples, 8 files"
"$DH" run --manifest "$WORK/gen/manifest.jsonl" --workload speech-asr --policy local \
    --ranks 2 --workers 2 --batch 4 > "$WORK/genrun.out" 2>&1
check "run on generated media accounts for all" contains "$WORK/genrun.out" "delivered 8 + failed 0 = 8"
"$DH" gen --workload speech-asr --out "$WORK/gen2" --scale huge > /dev/null 2> "$WORK/gen.err"
check "gen refuses an unknown scale" contains "$WORK/gen.err" "mini, small or full"

# ---- WebDataset shards: gen --format wds, index in place, run ----
"$DH" gen --workload kinetics-clips --out "$WORK/wds" --samples 12 --format wds --per-shard 5 \
    > "$WORK/wds.out" 2>&1
check "gen writes shards" test -f "$WORK/wds/shards/00002.tar" -a ! -e "$WORK/wds/video"
check "gen's shard lines carry captions, labels and metadata" contains \
    "$WORK/wds/manifest.jsonl" '"text":"w[0-9]*.*"label":[0-9]*,"meta":{"key":"00000000",'\
'"status":"success","url":"gen://0","items":1},"media":\[{"type":"video","path":"shards/00000.tar"'
"$DH" index "$WORK/wds" -o "$WORK/wds/again.jsonl" > "$WORK/wdsidx.out" 2>&1
check "index of gen's shards accounts for every sample" contains "$WORK/wdsidx.out" \
    "3 tar shards: 12 samples + 0 skipped"
check "index of gen's shards equals gen's manifest" cmp -s "$WORK/wds/manifest.jsonl" \
    "$WORK/wds/again.jsonl"
"$DH" run --manifest "$WORK/wds/manifest.jsonl" --workload kinetics-clips --ranks 2 \
    --workers 2 --batch 4 > "$WORK/wdsrun.out" 2>&1
check "run decodes every sample from the shards" contains "$WORK/wdsrun.out" \
    "delivered 12 + failed 0 = 12"
# the shards moved away: the run stops once most samples failed, naming why (it went on
# to the end and exited 0, feeding zeros); with --max-failed 1 it runs through and still fails
mkdir -p "$WORK/moved" && cp "$WORK/wds/manifest.jsonl" "$WORK/moved/"
"$DH" run --manifest "$WORK/moved/manifest.jsonl" --workload kinetics-clips --ranks 2 \
    --workers 2 --batch 4 --epochs 4 > "$WORK/mv.out" 2> "$WORK/mv.err"
check "missing shards: the run fails" test $? -eq 1
check "missing shards: stopped by --max-failed, naming the last failure" contains \
    "$WORK/mv.err" 'the run stopped: 1[6-9] of the 1[6-9] samples finished so far failed, over the --max-failed share 0.50 (the last, "shards/0000[0-2].tar:[^"]*" (.*shards/0000[0-2].tar[^)]*): cannot open: No such file[^;]*; the agent.s log names every one'
"$DH" run --manifest "$WORK/moved/manifest.jsonl" --workload kinetics-clips --ranks 2 \
    --workers 2 --batch 4 --epochs 1 --max-failed 1 > "$WORK/mv1.out" 2> "$WORK/mv1.err"
check "every sample failed: the run fails at its end" test $? -eq 1 -a \
    -n "$(grep 'every sample with media failed (12)' "$WORK/mv1.err")"
(cd "$WORK/wds" && "$DH" index 'shards/{00000..00002}.tar' -o braces.jsonl > ../braces.out 2>&1)
check "index on a brace pattern of shards" cmp -s "$WORK/wds/manifest.jsonl" \
    "$WORK/wds/braces.jsonl"
(cd "$WORK/wds" && "$DH" index shards/00000.tar --suffix json=ignore --suffix mp4=ignore \
    --suffix TXT=label -o rules.jsonl > ../rules.out 2> ../rules.err)
check "index --suffix overrides the defaults (a caption is no label)" contains "$WORK/rules.err" \
    'sample "00000000": member 00000000.txt: not an integer label'
check "index --suffix: every sample accounted" contains "$WORK/rules.out" \
    "1 tar shards: 0 samples + 5 skipped"
(cd "$WORK/wds" && "$DH" index shards/00000.tar --max-text-bytes 2 -o tb.jsonl > /dev/null \
    2> ../tb.err)
check "index --max-text-bytes: a longer caption costs its sample, named" contains "$WORK/tb.err" \
    'sample "00000000": member 00000000.txt: [0-9]* bytes, over the limit 2'
"$DH" index "$WORK/wds" -o "$WORK/wds/x.jsonl" --suffix gif=picture > /dev/null 2> "$WORK/sfx.err"
check "index --suffix names a bad rule" test $? = 2 -a -n "$(grep 'suffix rule "gif=picture"' \
    "$WORK/sfx.err")"
printf '# the last shard first\nshards/00002.tar\n\n' > "$WORK/wds/list.txt"
cp "$WORK/data/img/c.jpg" "$WORK/wds/loose.jpg"
(cd "$WORK/wds" && "$DH" index list.txt 'shards/0000{0,7}.tar' loose.jpg \
    "$WORK/data/img/c.jpg" -o list.jsonl > ../list.out 2> ../list.err)
check "index on a list keeps its order" test "$(head -c 26 "$WORK/wds/list.jsonl")" = \
    '{"id":"shards/00002.tar:00'
check "index names a shard that is not there" contains "$WORK/list.err" \
    "shards/00007.tar: skipped: No such file or directory"
check "index names a file outside the manifest's directory" contains "$WORK/list.err" \
    "c.jpg: skipped: outside the manifest's directory"
check "index on a list accounts for every path" contains "$WORK/list.out" \
    "5 files: 1 probed + 2 skipped + 2 tar shards: 7 samples + 0 skipped"
gzip -c "$WORK/wds/shards/00000.tar" > "$WORK/wds/shards/zipped.tar"
(cd "$WORK/wds" && "$DH" index 'shards/{00001,zipped}.tar' -o failed.jsonl --on-error fail \
    > ../zip.out 2> ../zip.err)
check "index --on-error fail exits 1 on a shard it cannot read" test $? -eq 1
check "and writes no manifest" test ! -e "$WORK/wds/failed.jsonl"
check "the unread shard is counted" contains "$WORK/zip.out" "(1 shards not read at all)"
rm "$WORK/wds/shards/zipped.tar"
# what users give: a .tar.gz / .tgz is named as compressed (it read as a bad media file),
# a quoted wildcard is explained, nothing indexed is a failure (it wrote an empty manifest
# and exited 0), a descending brace range and a list with blanks around its paths work,
# and a shard given to serve as its manifest is told to be indexed
mkdir -p "$WORK/wds/z"
gzip -c "$WORK/wds/shards/00001.tar" > "$WORK/wds/z/a.tar.gz"
cp "$WORK/wds/z/a.tar.gz" "$WORK/wds/z/b.tgz"
"$DH" index "$WORK/wds/z" -o "$WORK/wds/z/m.jsonl" > "$WORK/z.out" 2> "$WORK/z.err"
check "nothing indexed: index fails" test $? -eq 1 -a ! -e "$WORK/wds/z/m.jsonl"
check "nothing indexed: said" contains "$WORK/z.err" "nothing indexed: every input was skipped"
check "a .tgz is named as compressed" contains "$WORK/z.err" \
    "b.tgz: shard skipped: a gzip-compressed file"
(cd "$WORK/wds" && "$DH" index 'shards/*.tar' -o glob.jsonl > /dev/null 2> ../glob.err)
check "a quoted wildcard is explained" contains "$WORK/glob.err" \
    "a wildcard is the shell's to expand (leave it unquoted)"
(cd "$WORK/wds" && "$DH" index 'shards/{00002..00000}.tar' -o desc.jsonl > ../desc.out 2>&1)
check "a descending brace range: every shard, in that order" test \
    "$(head -c 26 "$WORK/wds/desc.jsonl")" = '{"id":"shards/00002.tar:00' -a \
    -n "$(grep '3 tar shards: 12 samples' "$WORK/desc.out")"
printf '  shards/00000.tar  \n\t# a comment\n' > "$WORK/wds/blanks.txt"
(cd "$WORK/wds" && "$DH" index blanks.txt -o blanks.jsonl > ../blanks.out 2>&1)
check "a list's blanks around a path are ignored" contains "$WORK/blanks.out" \
    "1 tar shards: 5 samples + 0 skipped"
"$DH" run --manifest "$WORK/wds/shards/00000.tar" --workload kinetics-clips --ranks 1 \
    --workers 1 --batch 1 --steps 1 > /dev/null 2> "$WORK/tarman.err"
check "a shard as a manifest is told to be indexed" contains "$WORK/tarman.err" \
    "is a tar shard, not a manifest: index the shards first"
"$DH" run --manifest "$WORK/wds/manifest.jsonl" --workload kinetics-clips --ranks 1 \
    --workers 1 --batch 1 --steps 1 --max-text-bytes 2 > /dev/null 2> "$WORK/runlim.err"
check "run and serve take the manifest's limits (index's --max-text-bytes)" contains \
    "$WORK/runlim.err" "text: [0-9]* bytes, over the limit 2 (--max-text-bytes)"
"$DH" inspect "$WORK/wds/manifest.jsonl" --workload kinetics-clips > "$WORK/insp.out" 2>&1
check "inspect counts the samples with a text, a label, metadata" contains "$WORK/insp.out" \
    "samples with a text 12, a label 12, metadata 12"
"$DH" inspect "$WORK/wds/manifest.jsonl" --max-text-bytes 2 > /dev/null 2>&1
check "inspect: every line skipped is a failure" test $? -eq 1
cp "$WORK/wds/shards/00000.tar" "$WORK/wds/keep.tar"
(cd "$WORK/wds" && "$DH" index keep.tar -o keep.tar > /dev/null 2> ../ow.err)
check "index -o an input shard is refused, the shard untouched" test $? -eq 2 -a \
    "$(cmp -s "$WORK/wds/keep.tar" "$WORK/wds/shards/00000.tar"; echo $?)" = 0
check "index -o NAME.tar: told a manifest is .jsonl" contains "$WORK/ow.err" \
    "a manifest, not a shard: name it .jsonl"
for cmd in sim run serve; do # each command's --help starts with its own usage (a trial)
    check "$cmd --help: its own usage first" \
        test "$("$DH" $cmd --help | head -n 1 | cut -d' ' -f1-3)" = "usage: datahelix $cmd"
done
"$DH" sim --workload omni-mix --ranks 2 --workers 2 --batch 4 --steps 2 --memory-budget 1 \
    > /dev/null 2> "$WORK/budget1.err"
check "--memory-budget 1: its bytes said" contains "$WORK/budget1.err" \
    "memory budget 1 byte (0.0 MiB) is below"
(cd "$WORK/wds" && "$DH" index nodir -o nodir/m.jsonl > /dev/null 2> ../nodir.err)
check "index -o into a missing directory: both missing paths named" contains "$WORK/nodir.err" \
    "cannot write nodir/m.jsonl: no directory nodir (and the input nodir does not exist either)"
(cd "$WORK/wds" && "$DH" index blanks.txt -o blanks.txt > /dev/null 2> ../ow2.err)
check "index -o its own list file is refused" contains "$WORK/ow2.err" \
    "is an input (blanks.txt): it would be overwritten"
"$DH" inspect "$WORK/wds/keep.tar" > /dev/null 2> "$WORK/itar.err"
check "inspect on a shard is told to index it" contains "$WORK/itar.err" \
    "is a tar shard, not a manifest"
check "a refused index says it wrote nothing in its summary" contains "$WORK/z.out" \
    "- not written: $WORK/wds/z/m.jsonl"
# an empty directory, or an empty shard, index nothing: refused too (it
# wrote an empty manifest and exited 0, and run failed later, further from the cause)
mkdir -p "$WORK/wds/empty/.hidden" && touch "$WORK/wds/empty/.hidden/x.mp4" "$WORK/wds/empty/old.jsonl"
"$DH" index "$WORK/wds/empty" -o "$WORK/wds/empty/m.jsonl" > /dev/null 2> "$WORK/empty.err"
check "index of an empty directory fails, writes nothing" test $? -eq 1 -a ! -e "$WORK/wds/empty/m.jsonl"
check "and says the directory holds no file to probe" contains "$WORK/empty.err" \
    "nothing indexed: $WORK/wds/empty holds no file to probe"
(cd "$WORK/wds/empty" && tar cf ../none.tar -T /dev/null &&
    "$DH" index ../none.tar -o ../none.jsonl > /dev/null 2> ../../none.err)
check "index of an empty shard fails, writes nothing" test $? -eq 1 -a ! -e "$WORK/wds/none.jsonl"
check "and says the shard holds no member" contains "$WORK/none.err" \
    "nothing indexed: the 1 tar shard holds no member; ../none.jsonl not written"
"$DH" gen --workload kinetics-clips --out "$WORK/wds2" --format zip > /dev/null 2> "$WORK/wds.err"
check "gen refuses an unknown format" contains "$WORK/wds.err" "--format files or wds"

# ---- usage errors: exit 2 with a message ----
"$DH" > /dev/null 2>&1; check "no command is a usage error" test $? -eq 2
"$DH" frobnicate > /dev/null 2>&1; check "unknown command is a usage error" test $? -eq 2
"$DH" index > /dev/null 2>&1; check "index without DIR is a usage error" test $? -eq 2
"$DH" serve > /dev/null 2> "$WORK/serve.err"
check "serve without a manifest is a usage error" contains "$WORK/serve.err" "serve needs --manifest"
"$DH" inspect m.jsonl --workload nope > /dev/null 2> "$WORK/wl.err"
check "unknown workload lists the built-ins" contains "$WORK/wl.err" "t2v-diffusion"
echo '{"video":{"frame":8}}' > "$WORK/spec.json"
"$DH" inspect "$WORK/data/manifest.jsonl" --spec "$WORK/spec.json" > /dev/null 2> "$WORK/spec.err"
check "a spec typo is an error naming its file" contains "$WORK/spec.err" \
    "spec $WORK/spec.json: video.frame: unknown key"
"$DH" inspect "$WORK/data/manifest.jsonl" --max-pixels abc > /dev/null 2>&1
check "a bad limit value is a usage error" test $? -eq 2
{ echo; cat "$WORK/data/manifest.jsonl"; echo "   "; } > "$WORK/data/blank.jsonl"
"$DH" inspect "$WORK/data/blank.jsonl" > "$WORK/blank.out" 2>&1
check "blank lines are counted apart" contains "$WORK/blank.out" "6 lines: 6 loaded + 0 skipped (2 blank lines ignored)"
"$DH" serve --manifest "$WORK/data/manifest.jsonl" --workers 2 --batch 4 > /dev/null \
    2> "$WORK/noranks.err"
check "serve without --ranks: its default named where it refuses" contains "$WORK/noranks.err" \
    "is below --ranks 8 (the default; give --ranks R"
"$DH" serve --manifest "$WORK/data/manifest.jsonl" --ranks 2 > /dev/null 2> "$WORK/nobatch.err"
check "serve without --batch: a usage error naming it" test $? -eq 2 -a \
    -n "$(grep -F 'serve needs --batch G' "$WORK/nobatch.err")"
"$DH" inspect /nonexistent.jsonl > "$WORK/nx.out" 2> "$WORK/nx.err"
check "a missing manifest is named" contains "$WORK/nx.err" "/nonexistent.jsonl"
check "and no summary of lines it never read" not_contains "$WORK/nx.out" "0 lines"

echo "e2e_cli: $pass passed, $fail failed"
test "$fail" -eq 0
