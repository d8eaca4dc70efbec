#!/usr/bin/env bash
# mutants.sh - the mutation test: COUNT seeded mutants of small generated media
# (H.264 in MP4 and Matroska, JPEG, PNG, FLAC) go through `index` and then
# through a real `run` that decodes every one of them under the descriptor of
# the file it was made from (so broken files reach the decoders, as a file
# changed under a manifest would). Nothing may crash or hang, every failure
# must name its sample, and the accounting must be exact:
# delivered + failed = scheduled. Under the ASan build this is the suite's
# "mutants under ASan" test; bench/run_mutants.sh runs it long.
#   usage: mutants.sh DATAHELIX DH_MUTATE [COUNT] [SEED] [KEEP_DIR]
set -uo pipefail
DH=${1:?usage: mutants.sh DATAHELIX DH_MUTATE [COUNT] [SEED] [KEEP_DIR]}
MUTATE=${2:?}
COUNT=${3:-300}
SEED=${4:-1}
FFMPEG=${DH_FFMPEG:-ffmpeg}
WORK=${5:-$(mktemp -d "${TMPDIR:-/tmp}/dhmut.XXXXXX")}
[[ -n ${5:-} ]] || trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/seed" "$WORK/m"
pass=0 fail=0
check() {
    local name=$1; shift
    if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $name"; fi
}
ff() { "$FFMPEG" -v error -y -nostdin "$@"; }
ff -f lavfi -i testsrc2=size=64x48:rate=10 -frames:v 12 -c:v libx264 -g 4 -bf 2 -pix_fmt yuv420p "$WORK/seed/v.mp4"
ff -f lavfi -i testsrc2=size=48x32:rate=12 -frames:v 8 -c:v libx264 -g 3 -pix_fmt yuv420p "$WORK/seed/w.mkv"
ff -f lavfi -i testsrc2=size=40x30 -frames:v 1 "$WORK/seed/i.jpg"
ff -f lavfi -i testsrc2=size=40x30 -frames:v 1 "$WORK/seed/p.png"
ff -f lavfi -i sine=sample_rate=8000 -t 0.5 "$WORK/seed/a.flac"
"$DH" index "$WORK/seed" -o "$WORK/seed/seed.jsonl" -q > /dev/null
check "the seeds index" test "$(wc -l < "$WORK/seed/seed.jsonl")" -eq 5

seeds=("$WORK/seed/v.mp4" "$WORK/seed/w.mkv" "$WORK/seed/i.jpg" "$WORK/seed/p.png" "$WORK/seed/a.flac")
"$MUTATE" "$SEED" "$COUNT" "$WORK/m" "${seeds[@]}"
check "mutants written" test "$(ls "$WORK/m" | wc -l)" -eq "$COUNT"

# index probes every mutant: some are still media, the rest are skipped with a reason.
timeout 600 "$DH" index "$WORK/m" -o "$WORK/m/probed.jsonl" -q > "$WORK/index.out" 2> "$WORK/index.err"
rc=$?
check "index over the mutants exits 0 (rc $rc)" test $rc -eq 0
check "index accounts for every mutant" grep -q "$COUNT files: .* probed + .* skipped" "$WORK/index.out"

# The run: every mutant under its seed's descriptor.
# (one awk pass: the seed lines by name, then mutant k takes seed k % 5's line)
awk -v count="$COUNT" -v order="v.mp4 w.mkv i.jpg p.png a.flac" '
    { for (f = 1; f <= 5; f++) { split(order, o, " ");
          if (index($0, "\"path\":\"" o[f] "\"")) line[f] = $0 } }
    END { split(order, o, " ");
          for (k = 0; k < count; k++) {
              f = k % 5 + 1; ext = substr(o[f], index(o[f], ".") + 1);
              name = sprintf("m%05d.%s", k, ext); l = line[f];
              gsub("\"" o[f] "\"", "\"" name "\"", l); print l } }' \
    "$WORK/seed/seed.jsonl" > "$WORK/m/all.jsonl"
# --max-failed 1: most mutants fail, by design; the run must go on through all of them
timeout 1200 "$DH" run --manifest "$WORK/m/all.jsonl" --policy pool --ranks 2 --workers 2 \
    --max-failed 1 \
    --batch 10 --epochs 1 --sample-timeout 30 --json "$WORK/run.json" --trace "$WORK/trace.json" \
    > "$WORK/run.out" 2> "$WORK/run.err"
rc=$?
check "the run over every mutant exits 0 (rc $rc)" test $rc -eq 0
delivered=$(sed -n 's/.*"delivered":\([0-9]*\).*/\1/p' "$WORK/run.json")
failed=$(sed -n 's/.*"failed":\([0-9]*\).*/\1/p' "$WORK/run.json")
scheduled=$(( (COUNT / 10) * 10 ))
check "delivered ${delivered:-?} + failed ${failed:-?} = scheduled $scheduled" \
    test "$(( ${delivered:-0} + ${failed:-0} ))" -eq "$scheduled"
named=$(grep -c '^datahelix: sample "m[0-9]*\.' "$WORK/run.err" || true)
shown=$(( ${failed:-0} < 20 ? ${failed:-0} : 20 ))
check "each failure shown names its sample ($named of the first $shown)" test "$named" -eq "$shown"
check "no sanitizer report" test -z "$(grep -l 'Sanitizer' "$WORK"/*.err 2>/dev/null)"
# The same mutants under random augmentation (a drawn clip, crop, flip and audio window):
# the drawn paths meet broken files too, and the accounting stays exact.
cat > "$WORK/aug.json" <<'JSON'
{"video": {"frames": 3, "clip_s": 0.5, "random_start": true, "fps_jitter": 0.3, "flip": 0.5,
           "resize": {"mode": "random_resized_crop", "size": 24}},
 "image": {"flip": 0.5, "resize": {"mode": "random_crop", "size": 16, "short_side": [20, 40]}},
 "audio": {"clip_s": 0.25, "random_offset": true}}
JSON
timeout 1200 "$DH" run --manifest "$WORK/m/all.jsonl" --policy helix --ranks 2 --workers 2 \
    --max-failed 1 --spec "$WORK/aug.json" \
    --batch 10 --epochs 1 --sample-timeout 30 --json "$WORK/aug.json.out" \
    > "$WORK/aug.out" 2> "$WORK/aug.err"
rc=$?
check "the augmented run over every mutant exits 0 (rc $rc)" test $rc -eq 0
adel=$(sed -n 's/.*"delivered":\([0-9]*\).*/\1/p' "$WORK/aug.json.out")
afail=$(sed -n 's/.*"failed":\([0-9]*\).*/\1/p' "$WORK/aug.json.out")
check "augmented: delivered ${adel:-?} + failed ${afail:-?} = scheduled $scheduled" \
    test "$(( ${adel:-0} + ${afail:-0} ))" -eq "$scheduled"
# The longest any one sample held a worker (the trace's longest "prepare" span, in us).
worst=$(grep -o '"name":"prepare[^"]*","ts":[0-9.]*,"dur":[0-9.]*' "$WORK/trace.json" |
        sed 's/.*"dur"://' | sort -g | tail -n 1)
echo "mutants: longest single sample on a worker: $(awk -v u="${worst:-0}" 'BEGIN { printf "%.1f ms", u / 1000 }')"
# Shards: mutants of a seed shard (its headers, pax records and members damaged alike) go
# through index, which must name what it cannot read and account for every shard; then the
# loose mutants packed into one shard, each with a caption, through index and a real run
# that decodes them in place.
mkdir -p "$WORK/sh/seed" "$WORK/sh/m" "$WORK/sh/packed"
/usr/bin/python3 - "$WORK" <<'PYEOF'
import io, os, sys, tarfile
w = sys.argv[1]
def add(t, name, data):
    i = tarfile.TarInfo(name); i.size = len(data); t.addfile(i, io.BytesIO(data))
with tarfile.open(os.path.join(w, "sh/seed/s.tar"), "w") as t:  # pax
    for k, f in enumerate(("v.mp4", "i.jpg", "p.png", "a.flac")):
        add(t, "%03d.%s" % (k, f.split(".")[1]), open(os.path.join(w, "seed", f), "rb").read())
        add(t, "%03d.txt" % k, ("caption %d \u00e9" % k).encode())
        add(t, "%03d.cls" % k, b"%d" % k)
        add(t, "%03d.json" % k, b'{"key": "%03d", "video_metadata": {"streams": [1, 2.5]}}' % k)
names = sorted(n for n in os.listdir(os.path.join(w, "m")) if n.startswith("m"))
with tarfile.open(os.path.join(w, "sh/packed/all.tar"), "w", format=tarfile.GNU_FORMAT) as t:
    for n in names:
        key, ext = n.split(".", 1)
        if ext in ("mp4", "mkv", "jpg", "png", "flac"):
            add(t, "%s.%s" % (key, ext), open(os.path.join(w, "m", n), "rb").read())
            add(t, key + ".txt", ("about " + key).encode())
PYEOF
SH=$(( COUNT / 5 ))
"$MUTATE" "$SEED" "$SH" "$WORK/sh/m" "$WORK/sh/seed/s.tar"
timeout 600 "$DH" index "$WORK/sh/m" -o "$WORK/sh/m/probed.jsonl" -q > "$WORK/shindex.out" \
    2> "$WORK/shindex.err"
rc=$?
check "index over $SH mutated shards exits 0 (rc $rc)" test $rc -eq 0
check "index accounts for every mutated shard" grep -q "$SH files: 0 probed + 0 skipped + $SH tar shards" "$WORK/shindex.out"
timeout 600 "$DH" index "$WORK/sh/packed" -o "$WORK/sh/packed/probed.jsonl" -q \
    > "$WORK/shpacked.out" 2> "$WORK/shpacked.err"
check "index over the packed mutants exits 0" test $? -eq 0
nsh=$(wc -l < "$WORK/sh/packed/probed.jsonl")
timeout 1200 "$DH" run --manifest "$WORK/sh/packed/probed.jsonl" --policy pool --ranks 2 \
    --workers 2 --batch 2 --epochs 1 --sample-timeout 30 --max-failed 1 --json "$WORK/shrun.json" \
    > "$WORK/shrun.out" 2> "$WORK/shrun.err"
check "the run over the shard's members exits 0" test $? -eq 0
d2=$(sed -n 's/.*"delivered":\([0-9]*\).*/\1/p' "$WORK/shrun.json")
f2=$(sed -n 's/.*"failed":\([0-9]*\).*/\1/p' "$WORK/shrun.json")
check "shard members: delivered ${d2:-?} + failed ${f2:-?} = scheduled $(( nsh / 2 * 2 ))" \
    test "$(( ${d2:-0} + ${f2:-0} ))" -eq "$(( nsh / 2 * 2 ))"
check "no sanitizer report (shards)" test -z "$(grep -l 'Sanitizer' "$WORK"/sh*.err 2>/dev/null)"
echo "mutants: $SH mutated shards: $(grep -o '[0-9]* tar shards: [0-9]* samples + [0-9]* skipped' "$WORK/shindex.out"); packed: $nsh samples, run delivered ${d2:-?} + failed ${f2:-?}"
echo "mutants: $COUNT mutants (seed $SEED): index $(grep -o '[0-9]* probed + [0-9]* skipped' "$WORK/index.out"); run delivered ${delivered:-?} + failed ${failed:-?} = $scheduled"
echo "mutants: $pass passed, $fail failed"
[[ $fail -eq 0 ]]
