#!/usr/bin/env bash
# run_store.sh - issue 24's measurements of media on object storage, against nginx on
# 127.0.0.1 with tests/store_proxy.py in front adding latency per request:
#  1. bytes fetched per sample against the bytes decoding needs (the members' sizes), for
#     MP4 clips with the moov box at the end (as gen writes them) and at the front
#     (remuxed with ffmpeg -movflags +faststart);
#  2. throughput of a real run (kinetics-clips, 2 ranks, 2 workers) from local shards, and
#     from nginx with 0, 20 and 50 ms added per request: with the default fetching ahead,
#     and with --fetchers 0 (a worker fetches a sample's bytes when it starts it);
#  3. against a whole-shard download-then-read pipeline (what WebDataset and Streaming do):
#     every shard downloaded whole through the same proxy (curl, one after another), then
#     read locally: time to first batch, bytes fetched, samples per second overall;
#  4. the simulator's answer to "how many fetchers does this bucket's latency need"
#     (simulated figures: webvid-caption, helix, 8 ranks, 8 workers, a 10 Gb/s link).
# The store (nginx and the Python proxy) runs on the same 2 cores as the workers: their
# CPU is printed beside each run's, as it is taken from decoding.
#   usage: bench/run_store.sh [BUILD_DIR] [WORKDIR] [SAMPLES] [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build/release}
WORK=${2:-/tmp/dh-bench-store}
N=${3:-96}
REP=${4:-3}
DH=$B/datahelix
PY=${DH_PYTHON:-/usr/bin/python3}
S3RVER=unused
rm -rf "$WORK" && mkdir -p "$WORK"
source tests/store_servers.sh
trap store_stop EXIT

"$DH" gen --workload kinetics-clips --out "$WORK/data/end" --samples "$N" --format wds \
    --per-shard 16 > /dev/null
# the same shards with each clip's moov box moved to the front (members renamed nothing)
mkdir -p "$WORK/data/front/shards"
$PY - "$WORK/data/end/shards" "$WORK/data/front/shards" << 'EOF'
import os, subprocess, sys, tarfile, tempfile
src, dst = sys.argv[1], sys.argv[2]
for name in sorted(os.listdir(src)):
    with tarfile.open(os.path.join(src, name)) as tin, \
         tarfile.open(os.path.join(dst, name), "w", format=tarfile.USTAR_FORMAT) as tout:
        for m in tin.getmembers():
            data = tin.extractfile(m).read()
            if m.name.endswith(".mp4"):
                with tempfile.TemporaryDirectory() as d:
                    a, b = os.path.join(d, "a.mp4"), os.path.join(d, "b.mp4")
                    open(a, "wb").write(data)
                    subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", a, "-c", "copy",
                                    "-movflags", "+faststart", b], check=True)
                    data = open(b, "rb").read()
            info = tarfile.TarInfo(m.name)
            info.size = len(data)
            import io
            tout.addfile(info, io.BytesIO(data))
EOF
store_nginx "$WORK/data"
store_proxy "http://127.0.0.1:$NGINX_PORT"
P=$PROXY_PORT
U=http://127.0.0.1:$P
nsh=$(ls "$WORK/data/end/shards" | wc -l)
last=$(printf '%05d' $((nsh - 1)))
for v in end front; do
    "$DH" index "$WORK/data/$v/shards" -o "$WORK/data/$v/local.jsonl" -q > /dev/null
    "$DH" index "$U/$v/shards/{00000..$last}.tar" -o "$WORK/$v.remote.jsonl" -q > /dev/null
done
media_bytes() { $PY -c "
import json,sys; print(sum(m['bytes'] for l in open(sys.argv[1]) for m in json.loads(l)['media']))" "$1"; }
field() { $PY -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
EPOCHS=${DH_BENCH_EPOCHS:-4}
ticks() { # CPU ticks of the store's processes (nginx and the proxy) so far
    local t=0
    for p in "${STORE_PIDS[@]}"; do t=$((t + $(awk '{print $14 + $15}' /proc/$p/stat 2> /dev/null || echo 0))); done
    echo $t
}
PIN=() WORKERS=2
run() { # run MANIFEST JSON [options]: the run's figures, its CPU and the store's in JSON.cpu
    local m=$1 j=$2; shift 2
    local t0; t0=$(ticks)
    /usr/bin/time -f "%U %S" -o "$j.time" "${PIN[@]}" "$DH" run --manifest "$m" \
        --workload kinetics-clips --ranks 2 --workers "$WORKERS" --batch 8 --epochs "$EPOCHS" \
        --json "$j" "$@" > "$j.out" 2>&1
    echo "$(awk '{print $1 + $2}' "$j.time") $(( $(ticks) - t0 ))" > "$j.cpu"
}

echo "== 1. bytes fetched per sample / bytes decoding needs ($EPOCHS epochs, no added latency)"
for v in end front; do
    need=$(media_bytes "$WORK/data/$v/local.jsonl")
    for f in 16 0; do
        run "$WORK/$v.remote.jsonl" "$WORK/bytes.$v.$f.json" --fetchers "$f"
        got=$(field "$WORK/bytes.$v.$f.json" fetch_bytes)
        req=$(field "$WORK/bytes.$v.$f.json" fetch_requests)
        printf '  moov at the %-5s fetchers %2d: %d bytes fetched for %d needed x %d epochs: %.3fx, %d requests (%.2f per sample)\n' \
            "$v" "$f" "$got" "$need" "$EPOCHS" "$($PY -c "print($got / ($EPOCHS * $need))")" "$req" \
            "$($PY -c "print($req / ($EPOCHS * $N))")"
    done
done

echo "== 2. throughput (samples/s, median of $REP, interleaved), moov at the front"
declare -A T C W
for d in 0 20 50; do
    store_ctl "$P" "{\"delay_ms\": $d}"
    for r in $(seq "$REP"); do
        for mode in local ahead noahead; do
            j=$WORK/tp.$d.$mode.$r.json
            case $mode in
                local) [[ $d == 0 ]] || continue; run "$WORK/data/front/local.jsonl" "$j" ;;
                ahead) run "$WORK/front.remote.jsonl" "$j" ;;
                noahead) run "$WORK/front.remote.jsonl" "$j" --fetchers 0 ;;
            esac
            T[$d.$mode]="${T[$d.$mode]:-} $(field "$j" throughput_sps)"
            C[$d.$mode]="$(cat "$j.cpu")"
        done
    done
done
med() { $PY -c "import statistics,sys; v=[float(x) for x in sys.argv[1:]]; print('%.1f (%.1f-%.1f)' % (statistics.median(v), min(v), max(v)))" $1; }
cpu() { set -- $1; printf 'CPU: datahelix %.2f s, store %.2f s' "$1" "$($PY -c "print($2 / 100)")"; }
printf '  local shards:                       %-22s (last run %s)\n' "$(med "${T[0.local]}")" "$(cpu "${C[0.local]}")"
for d in 0 20 50; do
    printf '  nginx +%2d ms, fetching ahead:      %-22s (last run %s)\n' "$d" "$(med "${T[$d.ahead]}")" "$(cpu "${C[$d.ahead]}")"
    printf '  nginx +%2d ms, fetch at task start: %-22s (last run %s)\n' "$d" "$(med "${T[$d.noahead]}")" "$(cpu "${C[$d.noahead]}")"
done

echo "== 2b. the store on a core of its own (as a remote store is): nginx and the proxy on CPU 1;"
echo "   DataHelix on CPU 0 with 1 worker (its fetchers on the same core); $((2 * EPOCHS)) epochs"
if [[ $(nproc) -ge 2 ]] && command -v taskset > /dev/null; then
    for p in "${STORE_PIDS[@]}"; do taskset -pc 1 "$p" > /dev/null; done
    PIN=(taskset -c 0) WORKERS=1 EPOCHS=$((2 * EPOCHS))
    for d in 0 50; do
        store_ctl "$P" "{\"delay_ms\": $d}"
        for r in $(seq "$REP"); do
            for mode in local ahead; do
                [[ $mode == local && $d != 0 ]] && continue
                j=$WORK/pin.$d.$mode.$r.json
                if [[ $mode == local ]]; then run "$WORK/data/front/local.jsonl" "$j"; else run "$WORK/front.remote.jsonl" "$j"; fi
                T[pin.$d.$mode]="${T[pin.$d.$mode]:-} $(field "$j" throughput_sps)"
                W[pin.$d.$mode]="${W[pin.$d.$mode]:-} $(field "$j" fetch_ahead_waited)/$(field "$j" fetch_ahead_missed)"
            done
        done
    done
    printf '  local shards:                  %s\n' "$(med "${T[pin.0.local]}")"
    for d in 0 50; do
        printf '  nginx +%2d ms, fetching ahead: %-22s (ranges waited for/not fetched ahead, per run:%s)\n' \
            "$d" "$(med "${T[pin.$d.ahead]}")" "${W[pin.$d.ahead]}"
    done
    for p in "${STORE_PIDS[@]}"; do taskset -pc 0-$(($(nproc) - 1)) "$p" > /dev/null; done
    PIN=() WORKERS=2 EPOCHS=$((EPOCHS / 2))
else
    echo "  skipped: needs 2 cores and taskset"
fi

echo "== 3. against downloading whole shards, then reading (moov at the front, +50 ms)"
store_ctl "$P" '{"delay_ms": 50}'
rm -rf "$WORK/dl" && mkdir -p "$WORK/dl/shards"
t0=$(date +%s.%N)
first=""
for k in $(seq 0 $((nsh - 1))); do
    n=$(printf '%05d' "$k")
    curl -s -f -o "$WORK/dl/shards/$n.tar" "$U/front/shards/$n.tar"
    [[ -n $first ]] || first=$(date +%s.%N)
done
t1=$(date +%s.%N)
"$DH" index "$WORK/dl/shards" -o "$WORK/dl/local.jsonl" -q > /dev/null
run "$WORK/dl/local.jsonl" "$WORK/dl.json" --epochs 1
run "$WORK/front.remote.jsonl" "$WORK/rr.json" --epochs 1
dlb=$(du -cb "$WORK"/dl/shards/*.tar | tail -1 | cut -f1)
$PY - "$t0" "$first" "$t1" "$WORK/dl.json" "$WORK/rr.json" "$dlb" "$N" << 'EOF'
import json, sys
t0, first, t1 = map(float, sys.argv[1:4])
dl, rr = json.load(open(sys.argv[4])), json.load(open(sys.argv[5]))
dlb, n = int(sys.argv[6]), int(sys.argv[7])
print("  download then read: first shard after %.2f s, first batch after %.2f s; %d bytes "
      "fetched; %.1f samples/s overall (%.2f s download + %.2f s run)" %
      (first - t0, first - t0 + dl["fill_wait_ms"] / 1000, dlb, n / (t1 - t0 + dl["makespan_s"]),
       t1 - t0, dl["makespan_s"]))
print("  DataHelix by range:  first batch after %.2f s; %d bytes fetched; %.1f samples/s" %
      (rr["fill_wait_ms"] / 1000, rr["fetch_bytes"], n / rr["makespan_s"]))
EOF

echo "== 4. simulated: webvid-caption, helix, 8 ranks x 8 workers, 10 Gb/s, 200 steps (samples/s, efficiency)"
printf '  %-10s' latency
for f in 0 4 16 64; do printf ' %18s' "fetchers $f"; done
echo
for lat in 0 20 50 100; do
    printf '  %-10s' "${lat} ms"
    for f in 0 4 16 64; do
        a=(--fetch-latency-ms "$lat" --fetchers "$f")
        [[ $lat == 0 ]] && a=()
        "$DH" sim --workload webvid-caption --policy helix --ranks 8 --workers 8 --steps 200 \
            "${a[@]}" --json "$WORK/s.json" > /dev/null
        printf ' %18s' "$($PY -c "import json; d=json.load(open('$WORK/s.json')); print('%.0f  %.3f' % (d['throughput_sps'], d['efficiency']))")"
    done
    echo
done
