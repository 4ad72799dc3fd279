#!/usr/bin/env bash
# A wheel of cuarrow that installs with no compiler, and the proof that it
# works by itself:
#   1. the sdist (python -m build --sdist), from which
#   2. the wheel is built (pip wheel, the build tools already installed:
#      scikit-build-core, nanobind; a persistent CMake folder and ccache
#      when present keep a rebuild short),
#   3. repaired by auditwheel: liblz4 / libzstd are grafted in (under
#      cuarrow.libs/) and the wheel is tagged manylinux_2_X; libcuda is never
#      part of it (opened at run time, not a DT_NEEDED: checked with readelf),
#   4. installed alone (with its declared dependencies, numpy and pyarrow,
#      from PyPI) into a fresh virtual environment, where a smoke test runs on
#      the host emulation of the driver, from outside the source tree.
#
#   scripts/wheel.sh            with python3
#   PYTHON=python3.12 scripts/wheel.sh   a cp312-abi3 wheel (any Python >= 3.12)
#
# The repaired wheel is left in build/wheel/wheelhouse/.  Needs what
# scripts/install-deps.sh installs (python/requirements-wheel.txt included).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
py=${PYTHON:-python3}
pytag=$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
out=$root/build/wheel
rm -rf "$out/sdist" "$out/src" "$out/dist" "$out/wheelhouse" "$out/venv"
mkdir -p "$out"

if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR=$root
fi
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}

echo "--- sdist"
"$py" -m build --sdist --no-isolation --outdir "$out/sdist" . >/dev/null
sdist=$(ls "$out"/sdist/cuarrow-*.tar.gz)
echo "$(basename "$sdist"): $(du -k "$sdist" | cut -f1) KiB"

echo "--- wheel from the sdist ($pytag)"
mkdir -p "$out/src"
# Times of extraction, not the sdist's (which are all one fixed date: the
# persistent CMake folder would never see a change); the same source path
# every time, so that ccache finds what it compiled before.
tar -xzmf "$sdist" -C "$out/src"
"$py" -m pip wheel -q --no-build-isolation --no-deps -w "$out/dist" \
  -Cbuild-dir="$out/cmake-$pytag" "$out"/src/cuarrow-*/

echo "--- auditwheel repair"
"$py" -m auditwheel repair --exclude 'libcuda.so*' -w "$out/wheelhouse" "$out"/dist/cuarrow-*.whl
wheel=$(ls "$out"/wheelhouse/cuarrow-*.whl)
"$py" -m auditwheel show "$wheel"

echo "--- contents"
unpacked=$out/unpacked
rm -rf "$unpacked"
"$py" -m zipfile -e "$wheel" "$unpacked"
tags=$(sed -n 's/^Tag: //p' "$unpacked"/cuarrow-*.dist-info/WHEEL)
echo "tags: $tags"
# Python >= 3.12: the one stable-ABI wheel (wheel.py-api); older: its own version.
want=$("$py" -c 'import sys; v = sys.version_info; print("cp312-abi3" if v >= (3, 12) else f"cp{v[0]}{v[1]}-cp{v[0]}{v[1]}")')
[[ $tags == "$want-manylinux_"* ]] || { echo "wheel.sh: tags $tags, expected $want-manylinux_*" >&2; exit 1; }
need() { [ -n "$(find "$unpacked" -path "$unpacked/$1" -print -quit)" ] || { echo "wheel.sh: $1 is not in the wheel" >&2; exit 1; }; }
need 'cuarrow/_cuarrow.*so'                  # cuarrow itself, linked statically into the extension
need 'cuarrow/libcuarrow_cuda_emulation.so'  # CUARROW_CUDA_DRIVER=emulated finds it beside the extension
need 'cuarrow.libs/liblz4*.so*'
need 'cuarrow.libs/libzstd*.so*'
while IFS= read -r -d '' elf; do
  if readelf -d "$elf" | grep -E 'NEEDED.*libcuda(rt)?\.so' ; then
    echo "wheel.sh: ${elf#"$unpacked"/} needs libcuda: the driver must only be opened at run time" >&2
    exit 1
  fi
done < <(find "$unpacked" -name '*.so*' -type f -print0)
if find "$unpacked" -name 'libcuda*' | grep .; then
  echo "wheel.sh: libcuda is in the wheel" >&2; exit 1
fi
rm -rf "$unpacked"
echo "$(basename "$wheel"): $(du -k "$wheel" | cut -f1) KiB"

echo "--- install into a fresh virtual environment, smoke test (emulated driver)"
"$py" -m venv "$out/venv"
"$out/venv/bin/python" -m pip install -q --disable-pip-version-check "$wheel"
smoke=$(mktemp -d)
trap 'rm -rf "$smoke"' EXIT
cd "$smoke"  # not the source tree: `import cuarrow` must be the installed wheel
export CUARROW_CUDA_DRIVER=emulated CUARROW_EMULATED_DEVICES=2
"$out/venv/bin/python" - "$out/venv" <<'EOF'
import os
import sys

import numpy as np
import pyarrow as pa

import cuarrow
from cuarrow import cuda

venv = os.path.realpath(sys.argv[1])
pkg = os.path.dirname(os.path.realpath(cuarrow.__file__))
assert pkg.startswith(venv + os.sep), f"cuarrow imported from {pkg}, not from the venv {venv}"

ctx = cuda.Context(0)
info = cuda.driver_info()
assert info["emulated"] and info["devices"] == 2, info
assert os.path.dirname(os.path.realpath(info["path"])) == pkg, f"emulation loaded from {info['path']}"

table = pa.table({"x": pa.array(np.arange(1000, dtype=np.int64)), "s": pa.array([str(i) for i in range(1000)])})
assert cuda.to_device(table, ctx).to_host().equals(table)

data = np.arange(256, dtype=np.int32)
buf = ctx.buffer_from_data(data)
assert isinstance(buf, cuda.CudaBuffer) and buf.size == data.nbytes
assert np.array_equal(np.frombuffer(buf.copy_to_host(), dtype=np.int32), data)

print(f"smoke: cuarrow from {pkg}, driver {info['path']}: ok")
EOF
"$out/venv/bin/python" -m cuarrow.demo >"$out/demo.log" 2>&1 ||
  { tail -n 40 "$out/demo.log" >&2; echo "wheel.sh: python -m cuarrow.demo failed (log: $out/demo.log)" >&2; exit 1; }
echo "smoke: python -m cuarrow.demo: ok"
echo "wheel.sh: $wheel"
