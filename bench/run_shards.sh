#!/usr/bin/env bash
# run_shards.sh - WebDataset shards against loose files (issue 21): the same generated
# workload written both ways (`gen`, and `gen --format wds`); `index` on each (samples/s,
# and the bytes it read against the media's bytes: MP4s as our encoder writes them, moov at
# the end, and remuxed with moov at the front, as `-movflags +faststart` and most web video
# have it); then the real engine's throughput from each, REPEATS interleaved rounds.
#   usage: bench/run_shards.sh [BUILD_DIR] [SAMPLES] [REPEATS] [SCALE] [WORKLOAD]
set -euo pipefail
cd "$(dirname "$0")/.."
B=$(cd "${1:-build/release}" && pwd)
N=${2:-96}
REPEATS=${3:-3}
SCALE=${4:-full}
WL=${5:-kinetics-clips}
PY=/usr/bin/python3
FFMPEG=${DH_FFMPEG:-ffmpeg}
D=$(mktemp -d "${TMPDIR:-/tmp}/dh-shards-bench.XXXXXX")
trap 'rm -rf "$D"' EXIT
echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
"$B/datahelix" gen --workload "$WL" --out "$D/files" --samples "$N" --scale "$SCALE"
"$B/datahelix" gen --workload "$WL" --out "$D/wds" --samples "$N" --scale "$SCALE" \
    --format wds --per-shard 32
# The same shards with every MP4 member remuxed moov-first (bytes otherwise alike).
mkdir -p "$D/front/shards"
"$PY" - "$D/wds/shards" "$D/front/shards" "$FFMPEG" <<'PYEOF'
import io, os, subprocess, sys, tarfile, tempfile
src, dst, ff = sys.argv[1:4]
for name in sorted(os.listdir(src)):
    with tarfile.open(os.path.join(src, name)) as t, \
            tarfile.open(os.path.join(dst, name), "w", format=tarfile.USTAR_FORMAT) as o:
        for m in t.getmembers():
            data = t.extractfile(m).read()
            if m.name.endswith(".mp4"):
                with tempfile.TemporaryDirectory() as tmp:
                    a, b = os.path.join(tmp, "a.mp4"), os.path.join(tmp, "b.mp4")
                    open(a, "wb").write(data)
                    subprocess.run([ff, "-v", "error", "-y", "-i", a, "-c", "copy",
                                    "-movflags", "+faststart", b], check=True)
                    data = open(b, "rb").read()
            i = tarfile.TarInfo(m.name)
            i.size = len(data)
            o.addfile(i, io.BytesIO(data))
PYEOF
echo "== index (page cache warm: a second pass each)"
for what in files wds front; do
    "$B/datahelix" index "$D/$what" -o "$D/$what/idx.jsonl" -q > /dev/null 2>&1 || true
    "$B/datahelix" index "$D/$what" -o "$D/$what/idx.jsonl" 2> /dev/null | sed "s/^/$what: /"
done
echo "== real engine: $WL, R=2 W=2, one epoch, samples/s"
for k in $(seq "$REPEATS"); do
    for what in files wds; do
        "$B/datahelix" run --manifest "$D/$what/manifest.jsonl" --workload "$WL" --ranks 2 \
            --workers 2 --epochs 1 --json "$D/r.json" > /dev/null
        "$PY" -c 'import json,sys; r=json.load(open(sys.argv[2]));
print("%s round %s: %.2f samples/s, delivered %d + failed %d" % (sys.argv[1], sys.argv[3],
      r["throughput_sps"], r["delivered"], r["failed"]))' "$what" "$D/r.json" "$k"
    done
done
