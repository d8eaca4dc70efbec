#!/usr/bin/env bash
# bench_index.sh - `datahelix index` rate on a folder of short real media.
#   usage: bench/bench_index.sh PATH/TO/datahelix [WORKDIR] [VIDEOS] [IMAGES]
# Generates VIDEOS short H.264 MP4 clips (1-3 s, 3 resolutions, B-frames) and
# IMAGES JPEG/PNG images with the ffmpeg CLI (once; reused if present), then
# indexes the folder three times with 2 threads and once with 1, printing
# files/s for each. The files are in the page cache (just written or read by
# the previous repetition): this measures probing, not the disk.
set -euo pipefail
DH=${1:?usage: bench_index.sh PATH/TO/datahelix [WORKDIR] [VIDEOS] [IMAGES]}
WORK=${2:-/tmp/dh-bench-index}
NV=${3:-160}
NI=${4:-80}
mkdir -p "$WORK/media"
if [[ ! -f "$WORK/media/.complete-$NV-$NI" ]]; then
    rm -rf "$WORK/media" && mkdir -p "$WORK/media"
    sizes=(320x240 640x360 160x120)
    for ((i = 0; i < NV; i++)); do
        ffmpeg -v error -y -nostdin -f lavfi -i "testsrc2=size=${sizes[$((i % 3))]}:rate=25" \
            -t $((1 + i % 3)) -c:v libx264 -preset ultrafast -bf 2 -g 25 -pix_fmt yuv420p \
            "$WORK/media/v$i.mp4"
    done
    for ((i = 0; i < NI; i++)); do
        ext=$([[ $((i % 4)) -eq 0 ]] && echo png || echo jpg)
        ffmpeg -v error -y -nostdin -f lavfi -i "testsrc2=size=$((200 + i * 7))x$((150 + i * 5))" \
            -frames:v 1 "$WORK/media/i$i.$ext"
    done
    touch "$WORK/media/.complete-$NV-$NI"
fi
for threads in 2 2 2 1; do
    "$DH" index "$WORK/media" -o "$WORK/manifest.jsonl" -j "$threads" -q | sed "s/^/threads=$threads  /"
done
