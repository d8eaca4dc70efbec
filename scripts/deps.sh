#!/usr/bin/env bash
# deps.sh - make sure the Debian 12 packages DataHelix builds and tests with
# are installed. As root it installs what is missing with apt-get; otherwise
# it prints the exact command to run and fails.
#
# Why these libraries: jansson (small, strict JSON with 64-bit integers),
# FFmpeg 5.1's libav* (the reference demuxers/decoders), libjpeg-turbo's
# TurboJPEG API (header reads, DCT-domain scaling), libpng, Check (forks each
# test, reports worker-thread asserts, works under TSan); ffmpeg/ffprobe make
# and verify test media. python3-dev builds the Python package's extension;
# numpy and torch (Debian's, for /usr/bin/python3) are what trainers use
# batches with; PyAV decodes for the PyTorch DataLoader the demo compares; venv, pip,
# setuptools and wheel build the package for another environment (tests/install_test.sh);
# clang builds the fuzz targets the tests run; its libFuzzer and sanitizer runtimes are
# in libclang-rt-14-dev, only a recommendation of clang, so it is named here (this script
# installs without recommendations). OpenMPI (openmpi-bin, libopenmpi-dev) is the
# distributed runtime the multi-node agent is built on (linked into the agent only).
# libcurl reads media on object storage (HTTP(S) range reads, S3's SigV4 signing), and
# expat (libexpat1-dev) the XML of an S3 listing (index s3://BUCKET/PREFIX/); nginx
# and s3rver (from the npm registry, run by nodejs) are the stores the storage tests start
# on 127.0.0.1; libmicrohttpd serves the live metrics (--metrics: a small HTTP server in its
# own thread, no HTTP parsing of ours), and Prometheus scrapes them in the metrics test;
# headless Chromium (with a font to draw text in) renders `datahelix report` in its test;
# s3rver goes to ~/.cache/datahelix/s3rver (DH_S3RVER_DIR elsewhere).
set -euo pipefail

PACKAGES=(
    build-essential cmake pkg-config
    libjansson-dev
    libavformat-dev libavcodec-dev libavutil-dev libswscale-dev libswresample-dev
    libturbojpeg0-dev libpng-dev
    check
    ffmpeg
    python3-dev python3-numpy python3-torch python3-av
    python3-venv python3-pip python3-setuptools python3-wheel
    clang libclang-rt-14-dev
    openmpi-bin libopenmpi-dev
    libcurl4-openssl-dev libexpat1-dev nginx-light curl
    libmicrohttpd-dev prometheus chromium fonts-dejavu-core
)
# node and npm may come from elsewhere (NodeSource): only asked for when missing
command -v node > /dev/null 2>&1 || PACKAGES+=(nodejs)
command -v npm > /dev/null 2>&1 || PACKAGES+=(npm)

missing=()
for p in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if [[ ${#missing[@]} -gt 0 ]]; then
    cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
    if [[ $(id -u) -ne 0 ]]; then
        echo "datahelix: missing system packages: ${missing[*]}" >&2
        echo "run as root:  $cmd" >&2
        exit 1
    fi
    echo "datahelix: installing ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# s3rver, once (the npm registry is a package registry CI reaches); a user's npm install
s3dir=${DH_S3RVER_DIR:-${HOME:-/root}/.cache/datahelix/s3rver}
if [[ ! -x $s3dir/node_modules/.bin/s3rver ]]; then
    echo "datahelix: installing s3rver 3.7.1 into $s3dir (npm)" >&2
    mkdir -p "$s3dir"
    npm install --prefix "$s3dir" --no-audit --no-fund --loglevel=error s3rver@3.7.1 >&2
fi
