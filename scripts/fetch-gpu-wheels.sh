#!/usr/bin/env bash
# Wheels of Dask (`dask`, `distributed`) and everything they need, for the
# GPU machine: Python 3.12, manylinux x86_64, no network there (see
# ../shared/gpu.md).  Run here, where pip reaches the registry:
#
#   scripts/fetch-gpu-wheels.sh          # into build/wheels (ignored by .gitignore)
#
# then carry build/wheels with the checkout (the device tool's `carry`);
# scripts/gpu-suite.sh run installs them there (scripts/install-wheels.py:
# only the ones the machine lacks or holds at a version Dask cannot use)
# so that python/tests/test_share.py's Dask tests and bench/dask_bench.py
# run on the GPU.
#
# The versions are those installed here (python/requirements-test.txt), so
# the GPU runs the Dask that CI runs.  Every dependency is fetched, also
# those the machine already has (click, cloudpickle, jinja2, ...: their
# versions there are not known here, and they weigh little); numpy, pandas
# and pyarrow are not dependencies of these two and never travel.
#
# UCX (`distributed-ucxx-cu13` and the RAPIDS libraries under it) is fetched
# apart, by scripts/fetch-gpu-ucx.sh, into a slimmed site tree
# (build/ucx-site) that runs on this same Dask set; see docs/sharing.md,
# "Dask over UCX on the GPU machine".
#
# pip evaluates environment markers with this Python, so a Python older
# than 3.12 here also fetches importlib-metadata and its needs (60 KiB);
# install-wheels.py evaluates them there and leaves those out.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=build/wheels

dask_v=$(python3 -c "import dask; print(dask.__version__)")
distributed_v=$(python3 -c "import distributed; print(distributed.__version__)")

rm -rf "$dest"
mkdir -p "$dest"
# pip matches each manylinux tag exactly: name the ones the wheels of these
# packages carry (all below the machine's glibc 2.39).
python3 -m pip download -q --disable-pip-version-check --only-binary=:all: --implementation cp \
  --python-version 3.12 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
  -d "$dest" "dask==$dask_v" "distributed==$distributed_v"

for heavy in numpy pandas pyarrow; do
  if ls "$dest/$heavy"-*.whl >/dev/null 2>&1; then
    echo "fetch-gpu-wheels: $heavy was fetched as a dependency; the GPU machine has its own" >&2
    exit 1
  fi
done
# nvCOMP 6 (libnvcomp.so.6, 25 MiB; the package's `nvcomp` extra) apart, in
# build/wheels-nvcomp: GPU decompression of ZSTD bodies
# (file_read_options::gpu_decompression).  Carried only for the runs that
# need it.  The wheel is slimmed for the carry (64 MiB with the checkout):
# its command-line tool (nvlzcat, 6.5 MB packed), headers and CMake files
# are left out, the library and the package's loader kept, so that the
# package finds the library as a user's install would.  Then the checkout
# (15 MB), build/gpu (22 MB), build/wheels (5 MB) and it (23 MB) fit.
rm -rf build/wheels-nvcomp
python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_28_x86_64 -d build/wheels-nvcomp "nvidia-libnvcomp-cu13==6.0.0.12"
python3 - build/wheels-nvcomp/*.whl <<'PY'
import sys, zipfile
from pathlib import Path

whl = Path(sys.argv[1])
slim = whl.with_suffix(".slim")
with zipfile.ZipFile(whl) as src, zipfile.ZipFile(slim, "w", zipfile.ZIP_DEFLATED) as out:
    for item in src.infolist():
        if not any(part in item.filename for part in ("/bin/", "/include/", "/cmake/")):
            out.writestr(item, src.read(item.filename))
slim.replace(whl)
PY
ls -1 "$dest" build/wheels-nvcomp
echo "fetch-gpu-wheels: $(ls "$dest"/*.whl | wc -l) wheels, $(du -sh "$dest" | cut -f1) in $dest" \
  "(dask $dask_v, distributed $distributed_v); carry it: [\"build/wheels\", ...]"
