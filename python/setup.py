"""Builds and installs the `datahelix` package for the interpreter that runs this
script (a venv's included), against an installed libdatahelix found with pkg-config:

    cmake --install build/release --prefix /usr/local     # or any prefix
    python -m pip install --no-build-isolation ./python    # this interpreter's package

With another prefix, point pkg-config at it first:
PKG_CONFIG_PATH=PREFIX/lib/pkgconfig (or PREFIX/lib/x86_64-linux-gnu/pkgconfig).
The extension is linked with an rpath to that library directory, so nothing else
needs setting at run time. Only Debian's python3-setuptools (and python3-pip for
`pip`) are needed: --no-build-isolation keeps pip from fetching anything.
"""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup



def pkg_config(*args):
    if not shutil.which("pkg-config"):
        sys.exit("datahelix: pkg-config is missing (apt-get install pkg-config)")
    try:
        out = subprocess.run(["pkg-config"] + list(args) + ["datahelix"], check=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True).stdout
    except subprocess.CalledProcessError as e:
        sys.exit("datahelix: pkg-config cannot find an installed libdatahelix (%s); install it "
                 "first (cmake --install build/release --prefix PREFIX) and set "
                 "PKG_CONFIG_PATH=PREFIX/lib/pkgconfig if PREFIX is not a system one"
                 % e.stderr.strip())
    return out.split()


def version():
    return pkg_config("--modversion")[0]


cflags, libs = pkg_config("--cflags"), pkg_config("--libs")
include_dirs = [f[2:] for f in cflags if f.startswith("-I")]
library_dirs = [f[2:] for f in libs if f.startswith("-L")]
libraries = [f[2:] for f in libs if f.startswith("-l")]

setup(
    name="datahelix",
    version=version(),
    description="DataHelix for PyTorch trainers: batches served by the node's agent",
    packages=["datahelix"],
    ext_modules=[Extension("datahelix._datahelix",
                           [os.path.join("datahelix", "_datahelix.c"),
                            os.path.join("datahelix", "_batch.c")],
                           include_dirs=include_dirs, library_dirs=library_dirs,
                           libraries=libraries, runtime_library_dirs=library_dirs,
                           extra_compile_args=["-std=c11"])],
)
