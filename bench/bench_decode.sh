#!/usr/bin/env bash
# bench_decode.sh - video decode throughput: DataHelix's decoder against the
# ffmpeg tool decoding the same frames single-threaded (all frames, RGB24 at
# native size, CPU time of each).
#   usage: bench/bench_decode.sh BUILD_DIR [WORKDIR]
set -euo pipefail
B=${1:?usage: bench_decode.sh BUILD_DIR [WORKDIR]}
W=${2:-/tmp/dh-bench-decode}
mkdir -p "$W"
for spec in 1280x720:25:250 1920x1080:30:150; do
    IFS=: read -r size fps gop <<< "$spec"
    f="$W/clip_$size.mp4"
    [[ -f $f ]] || ffmpeg -v error -y -nostdin -f lavfi -i "testsrc2=size=$size:rate=$fps" -t 10 \
        -c:v libx264 -preset veryfast -g "$gop" -bf 2 -pix_fmt yuv420p "$f"
done
files=("$W"/clip_*.mp4)
"$B/bench_decode" "${files[@]}" | tail -n 1
cpu=0
for f in "${files[@]}"; do
    t=$( { /usr/bin/time -f "%U %S" ffmpeg -v error -nostdin -threads 1 -i "$f" -vf format=rgb24 \
        -f null - ; } 2>&1 | tail -n 1 | awk '{print $1 + $2}')
    cpu=$(awk -v a="$cpu" -v b="$t" 'BEGIN {print a + b}')
done
frames=$(( 250 + 300 ))
awk -v c="$cpu" -v n="$frames" 'BEGIN {printf "ffmpeg tool: %d frames in %.3f s CPU: %.1f frames/s\n", n, c, n / c}'
