#!/usr/bin/env bash
# demo.sh - the main job, from a fresh Debian 12 machine: install packages,
# build, then a tour of the catalog (index + inspect of a mixed corpus made
# with the ffmpeg tool) and of the simulator; `datahelix demo` (three real
# workloads decoded by the real engine for 4 emulated ranks under local, pool
# and helix); and the main job, training: a 2-rank PyTorch DDP job training a
# small video-caption model on WebDataset shards with their captions, fed by
# `datahelix serve` reading the shards in place, then the same job fed by the
# PyTorch DataLoader with PyAV, side by side. Outputs go to demo-out/. A few
# minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh

echo "== build"
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=RelWithDebInfo > /dev/null
cmake --build build/release -j "$(nproc 2>/dev/null || echo 2)" > build/release.build.log 2>&1 \
    || { cat build/release.build.log; exit 1; }
DH=build/release/datahelix

OUT=demo-out
rm -rf "$OUT"
mkdir -p "$OUT/media/video" "$OUT/media/image" "$OUT/media/audio"
ff() { ffmpeg -v error -y -nostdin "$@"; }

echo "== generate media (ffmpeg command-line encoders)"
# Kinetics-like clips: 25/30 fps, resolution mix, keyframe intervals of 1-10 s.
sizes=(340x256 340x256 640x360 1280x720 340x256 640x360 1280x720 340x256)
for i in "${!sizes[@]}"; do
    fps=$(( i % 2 ? 30 : 25 )); secs=$(( 2 + i % 4 )); gop=$(( fps * (1 + i % 3) ))
    ff -f lavfi -i "testsrc2=size=${sizes[$i]}:rate=$fps" -t "$secs" -c:v libx264 -preset veryfast \
       -g "$gop" -bf 2 -pix_fmt yuv420p "$OUT/media/video/clip$i.mp4"
done
ff -f lavfi -i testsrc2=size=640x360:rate=30 -t 3 -c:v libx265 -preset ultrafast \
   -x265-params log-level=none:keyint=60 -pix_fmt yuv420p "$OUT/media/video/hevc.mkv"
for s in 512x384 1024x768 2048x1536 300x600; do
    ff -f lavfi -i "testsrc2=size=$s" -frames:v 1 "$OUT/media/image/img_$s.jpg"
done
ff -f lavfi -i testsrc2=size=800x600 -frames:v 1 "$OUT/media/image/diagram.png"
for d in 2 7 15; do
    ff -f lavfi -i "sine=frequency=300:sample_rate=16000" -t "$d" "$OUT/media/audio/speech_${d}s.flac"
done
echo "not a media file" > "$OUT/media/README.txt"   # shows how a skipped file is reported

echo "== index (headers only)"
"$DH" index "$OUT/media" -o "$OUT/manifest.jsonl" || true
echo
for w in kinetics-clips omni-mix; do
    echo "== inspect with the $w spec"
    "$DH" inspect "$OUT/manifest.jsonl" --workload "$w" --json "$OUT/inspect-$w.json"
    echo
done
echo "== simulated comparison at cluster scale (R=8, W=32; simulated figures)"
"$DH" bench --mode sim --workloads kinetics-clips,native-res-video,omni-mix --steps 300 \
    --json "$OUT/bench-sim.json"
echo
echo "== real media, real decoding, three policies (emulated ranks)"
"$DH" demo --out "$OUT"
echo

# The main job: training. Two torch.distributed (gloo) ranks train a small video-text
# model (a contrastive loss between clips and their captions) for 2 epochs on WebDataset
# shards of webvid-caption-like clips, each with its caption (.txt), label and metadata,
# fed first by `datahelix serve` (the shards read in place), then by the PyTorch
# DataLoader + DistributedSampler decoding each member with PyAV; the same model, the
# same emulated accelerator time per sample, the same CPU budget.
PY=/usr/bin/python3
echo "== WebDataset shards with captions (datahelix gen --format wds)"
"$DH" gen --workload webvid-caption --out "$OUT/shards" --samples 96 --format wds --per-shard 24
M="$OUT/shards/manifest.jsonl"
SOCK="@datahelix-demo-$$"
echo "== training: a video-caption model, DDP on 2 ranks fed by datahelix serve from the"
echo "   shards, then by the PyTorch DataLoader"
"$DH" serve --manifest "$M" --workload webvid-caption --ranks 2 --workers 2 --batch 8 \
    --epochs 2 --socket "$SOCK" > "$OUT/serve.out" 2> "$OUT/serve.err" &
AGENT=$!
DH_PYTHONPATH=build/release/python "$PY" examples/train_ddp.py --ranks 2 --epochs 2 \
    --socket "$SOCK" --objective caption --emulate-ms-per-sample 15 \
    | tail -n 1 > "$OUT/train-datahelix.json"
wait $AGENT
DH_PYTHONPATH=build/release/python "$PY" examples/train_ddp.py --ranks 2 --loader torch \
    --manifest "$M" --frames 8 --workers 2 --batch 8 --epochs 2 --objective caption \
    --emulate-ms-per-sample 15 | tail -n 1 > "$OUT/train-torch.json"
"$PY" - "$OUT/train-datahelix.json" "$OUT/train-torch.json" <<'PYEOF'
import json, sys
rows = [json.load(open(f)) for f in sys.argv[1:]]
print("%-10s %6s %8s %10s %10s %10s %10s %11s %16s" % ("loader", "steps", "samples",
      "samples/s", "wait p50", "wait p95", "wait p99", "input wait", "loss first/last"))
for r in rows:
    print("%-10s %6d %8d %10.1f %8.1fms %8.1fms %8.1fms %10.1f%% %8.2f / %.2f" % (
        r["loader"], r["steps"], r["samples"], r["throughput_sps"], r["wait_p50_ms"],
        r["wait_p95_ms"], r["wait_p99_ms"], 100 * r["input_wait_frac"], r["loss_first"],
        r["loss_last"]))
PYEOF
echo
echo "catalog tour: $OUT/manifest.jsonl, $OUT/inspect-*.json   simulated bench: $OUT/bench-sim.json"
