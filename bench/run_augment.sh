#!/usr/bin/env bash
# run_augment.sh - issue 23's measurements of random augmentation:
#  1. decode CPU per sample, augmented against plain, on real generated media (one thread,
#     bench_augment): spatial augmentation (random_resized_crop + flip against the centre
#     crop, the same frames) and temporal (a random 2 s clip start with 20% jitter against
#     the centred 2 s clip), each beside the CPU model's prediction of the same draws;
#  2. the real engine's CPU-model MAPE (after its online calibration) with random clip
#     starts against the fixed centred clip;
#  3. the simulated suite (bench --mode sim, every workload and policy) with --augment
#     against without (simulated figures; the GPU truth is the same in both, --augment
#     changes what preparing samples costs).
#   usage: bench/run_augment.sh [BUILD_DIR] [WORKDIR] [SAMPLES] [EPOCHS]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build/release}
W=${2:-/tmp/dh-bench-augment}
N=${3:-48}
E=${4:-3}
DH=$B/datahelix
PY=${DH_PYTHON:-/usr/bin/python3}
mkdir -p "$W"
[[ -f $W/kin/manifest.jsonl ]] || "$DH" gen --workload kinetics-clips --scale small \
    --samples "$N" --out "$W/kin" > /dev/null
[[ -f $W/img/manifest.jsonl ]] || "$DH" gen --workload laion-images --scale small \
    --samples "$N" --out "$W/img" > /dev/null
spec() { printf '%s\n' "$2" > "$W/$1.json"; }
spec v-plain '{"base":"kinetics-clips","video":{"clip_s":2}}'
spec v-spatial '{"base":"kinetics-clips","video":{"clip_s":2,"flip":0.5,
  "resize":{"mode":"random_resized_crop","size":224}}}'
spec v-temporal '{"base":"kinetics-clips","video":{"clip_s":2,"random_start":true,
  "fps_jitter":0.2}}'
spec v-all '{"base":"kinetics-clips","video":{"clip_s":2,"random_start":true,"fps_jitter":0.2,
  "flip":0.5,"resize":{"mode":"random_resized_crop","size":224}}}'
spec i-plain '{"base":"laion-images"}'
spec i-flip '{"base":"laion-images","image":{"flip":0.5}}'
spec i-all '{"base":"laion-images","image":{"flip":0.5,
  "resize":{"mode":"random_resized_crop","size":224}}}'

echo "== 1. decode CPU per sample (one thread, $N samples x $E epochs, each epoch its draws)"
"$B/bench_augment" "$W/kin/manifest.jsonl" "$E" "$W"/v-plain.json "$W"/v-spatial.json \
    "$W"/v-temporal.json "$W"/v-all.json | sed "s|$W/||"
"$B/bench_augment" "$W/img/manifest.jsonl" "$E" "$W"/i-plain.json "$W"/i-flip.json "$W"/i-all.json | sed "s|$W/||"

echo "== 2. CPU-model MAPE of the real engine (helix, R=2 W=2, G=8, $E epochs, calibrated online)"
for s in v-plain v-temporal v-all; do
    "$DH" run --manifest "$W/kin/manifest.jsonl" --spec "$W/$s.json" --policy helix \
        --ranks 2 --workers 2 --batch 8 --epochs "$E" --json "$W/$s.run.json" > /dev/null
    "$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); \
print('%-10s cpu MAPE %.1f%%  throughput %.1f samples/s  delivered %d + failed %d' % \
(sys.argv[2], 100 * r['cpu_mape'], r['throughput_sps'], r['delivered'], r['failed']))" \
        "$W/$s.run.json" "$s"
done

echo "== 3. the simulated suite (simulated figures), R=8 W=32, 200 steps: plain | --augment"
"$DH" bench --mode sim --json "$W/sim-plain.json" > /dev/null
"$DH" bench --mode sim --augment --json "$W/sim-aug.json" > /dev/null
"$PY" - "$W/sim-plain.json" "$W/sim-aug.json" <<'PYEOF'
import json, sys
def runs(path):
    d = json.load(open(path))
    rs = d["runs"] if isinstance(d, dict) and "runs" in d else d
    return {(r["workload"], r["policy"]): r for r in rs}
a, b = runs(sys.argv[1]), runs(sys.argv[2])
print("%-18s %-8s %22s %22s" % ("workload", "policy", "samples/s plain | aug", "efficiency plain | aug"))
for k in sorted(a):
    if k in b:
        print("%-18s %-8s %10.1f | %9.1f %10.3f | %9.3f" % (k[0], k[1], a[k]["throughput_sps"],
              b[k]["throughput_sps"], a[k]["efficiency"], b[k]["efficiency"]))
PYEOF
