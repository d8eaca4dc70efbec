#!/usr/bin/env bash
# install_test.sh - `cmake --install` into a temporary prefix, then build and
# run two consumers of the installed library: one through pkg-config, one
# through find_package(datahelix) in a CMake project.
#   usage: install_test.sh BUILD_DIR
set -euo pipefail
BUILD=${1:?usage: install_test.sh BUILD_DIR}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dhinstall.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cmake --install "$BUILD" --prefix "$WORK/prefix" > "$WORK/install.log"
libdir=$(ls -d "$WORK"/prefix/lib*/ | head -n 1)
for f in include/datahelix.h bin/datahelix; do
    test -e "$WORK/prefix/$f" || { echo "FAIL: $f not installed"; exit 1; }
done
for f in libdatahelix.so libdatahelix.a pkgconfig/datahelix.pc cmake/datahelix/datahelixConfig.cmake; do
    find "$libdir" -path "*$f" | grep -q . || { echo "FAIL: $f not installed"; exit 1; }
done
cat > "$WORK/consumer.c" <<'C'
#include <datahelix.h>
#include <stdio.h>
#include <string.h>
int main(void)
{
    dh_manifest *m;
    const char *line = "{\"id\":\"a\",\"text_tokens\":3}";
    if (dh_manifest_new("", NULL, &m) || dh_manifest_parse_line(m, line, strlen(line), 1, NULL, 0))
        return 1;
    printf("%s %lld %s\n", dh_version_string(), (long long)dh_manifest_count(m), dh_err_name(DH_ELIMIT));
    dh_manifest_free(m);
    return 0;
}
C
export PKG_CONFIG_PATH="$libdir/pkgconfig"
# shellcheck disable=SC2046
cc -std=c11 "$WORK/consumer.c" -o "$WORK/consumer_pc" $(pkg-config --cflags --libs datahelix)
out=$(LD_LIBRARY_PATH="$libdir" "$WORK/consumer_pc")
[[ "$out" == *" 1 DH_ELIMIT" ]] || { echo "FAIL: pkg-config consumer printed '$out'"; exit 1; }

mkdir -p "$WORK/cmake-consumer"
cp "$WORK/consumer.c" "$WORK/cmake-consumer/"
cat > "$WORK/cmake-consumer/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.25)
project(consumer C)
find_package(datahelix 0.2 REQUIRED)
add_executable(consumer consumer.c)
target_link_libraries(consumer PRIVATE datahelix::datahelix_static)
CM
cmake -S "$WORK/cmake-consumer" -B "$WORK/cmake-consumer/build" \
    -DCMAKE_PREFIX_PATH="$WORK/prefix" > "$WORK/cm.log" 2>&1 || { cat "$WORK/cm.log"; exit 1; }
cmake --build "$WORK/cmake-consumer/build" > "$WORK/cmb.log" 2>&1 || { cat "$WORK/cmb.log"; exit 1; }
out=$("$WORK/cmake-consumer/build/consumer")
[[ "$out" == *" 1 DH_ELIMIT" ]] || { echo "FAIL: CMake consumer printed '$out'"; exit 1; }
# Only dh_ symbols are exported by the shared library.
extra=$(nm -D --defined-only "$libdir/libdatahelix.so" | awk '{print $3}' | grep -v '^dh_' || true)
[[ -z "$extra" ]] || { echo "FAIL: non-dh_ exports: $extra"; exit 1; }
# The Python package, when the build made one, imports from where it was installed.
if [[ -f "$BUILD/python/datahelix/__init__.py" ]]; then
    pkg=$(find "$WORK/prefix" -path "*dist-packages/datahelix/__init__.py" | head -n 1)
    [[ -n "$pkg" ]] || { echo "FAIL: the Python package was not installed"; exit 1; }
    out=$(cd "$WORK" && PYTHONPATH=$(dirname "$(dirname "$pkg")") /usr/bin/python3 -c \
          'import datahelix; print(datahelix.__file__, datahelix.default_socket("j"))')
    [[ "$out" == "$WORK/prefix/"*" @datahelix-"*"-j" ]] ||
        { echo "FAIL: installed Python package printed '$out'"; exit 1; }
fi
# The package built with pip for another environment: a venv (seeing Debian's setuptools,
# wheel and numpy through --system-site-packages) against the installed library, offline.
PY=/usr/bin/python3
if "$PY" -c 'import setuptools, wheel, numpy, venv' 2> /dev/null; then
    "$PY" -m venv --system-site-packages "$WORK/venv"
    cp -r "$(dirname "$0")/../python" "$WORK/pysrc" # pip builds in the tree: not the repo's
    rm -rf "$WORK/pysrc/build" "$WORK/pysrc/"*.egg-info
    PKG_CONFIG_PATH="$libdir/pkgconfig" "$WORK/venv/bin/python" -m pip install -q \
        --no-build-isolation --no-index "$WORK/pysrc" > "$WORK/pip.log" 2>&1 ||
        { cat "$WORK/pip.log"; echo "FAIL: pip install into a venv"; exit 1; }
    out=$(cd "$WORK" && env -u PYTHONPATH "$WORK/venv/bin/python" -c \
          'import datahelix; print(datahelix.__file__, datahelix.Loader.__name__)')
    [[ "$out" == "$WORK/venv/lib/python3"*"/site-packages/datahelix/__init__.py Loader" ]] ||
        { echo "FAIL: the venv's package printed '$out'"; exit 1; }
else
    echo "install_test: no venv check ($PY lacks setuptools, wheel, numpy or venv)"
fi
echo "install_test: 1 passed, 0 failed"
