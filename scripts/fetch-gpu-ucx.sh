#!/usr/bin/env bash
# Dask's UCX comm (`distributed-ucxx-cu13` and the RAPIDS libraries under it)
# for the GPU machine, unpacked and slimmed into a site tree that travels with
# the checkout (the device tool carries 64 MiB in all; the wheels take 51 MiB,
# the slimmed tree far less).  Run here, where pip reaches the registry:
#
#   scripts/fetch-gpu-ucx.sh          # into build/ucx-site (ignored by .gitignore)
#
# then carry build/ucx-site with build/wheels (scripts/fetch-gpu-wheels.sh:
# the Dask set CI uses), and build/wheel/wheelhouse if it holds a cuarrow
# wheel for Python 3.12 (else the suite builds the package there), and run
# `scripts/gpu-suite.sh ucx` there (docs/sharing.md, "Dask over UCX on the
# GPU machine").
#
# What goes in: distributed-ucxx-cu13, ucxx-cu13, libucxx-cu13, libucx-cu13,
# rmm-cu13, librmm-cu13, rapids-logger, installed with --no-deps at the
# versions below (UCX_SET overrides the list).  What stays out:
# - rapids-dask-dependency: it pins dask and distributed to 2026.7.1, while
#   CI (and build/wheels) use 2026.8.0; distributed-ucxx 0.52 imports and
#   registers its "ucx" comm with 2026.8.0 (checked here, see docs), so the
#   suite runs it on CI's Dask set;
# - what the GPU machine has (its image's package list): numpy, cuda-core,
#   cuda-bindings, cuda-pathfinder, nvidia-ml-py, pyyaml; the suite checks
#   their versions against what these wheels require (scripts/ucx-check.py).
#
# Slimmed: static libraries, libtool files, headers, CMake and pkg-config
# files, UCX's perf tests, examples and demo programs, the tests folders,
# debug sections (strip --strip-debug) wherever the stripped file still
# loads (not UCX's five core libraries: see below); copies of one
# library under its other names (libucp.so, .so.0, .so.0.0.0: wheels cannot
# hold links) become relative symbolic links, which the device tool carries
# as links.  Kept: every run-time library, UCX's transport plugins
# (lib/ucx/: cuda_copy and cuda_ipc in libuct_cuda, cma, the CUDA
# memory hooks; tcp, posix/sysv shared memory and self are in libuct itself),
# UCX's config folder and `ucx_info` (the suite prints `ucx_info -v` and the
# transports it finds).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=build/ucx-site
dl=build/ucx-wheels   # the downloaded wheels, kept here only (not carried)

UCX_SET=${UCX_SET:-"distributed-ucxx-cu13==0.52.0 ucxx-cu13==0.52.0 libucxx-cu13==0.52.0 libucx-cu13==1.21.0
  rmm-cu13==26.10.0 librmm-cu13==26.10.0 rapids-logger==0.3.0"}
# The manylinux tags these wheels carry (pip matches each exactly), all below
# the machine's glibc 2.39.
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do
  platforms+=(--platform "$p")
done

rm -rf "$dl" "$dest"
mkdir -p "$dl"
# shellcheck disable=SC2086 # UCX_SET is a list of requirements
python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --implementation cp \
  --python-version 3.12 "${platforms[@]}" -d "$dl" $UCX_SET
echo "fetch-gpu-ucx: $(ls "$dl"/*.whl | wc -l) wheels, $(du -sh "$dl" | cut -f1) in $dl"

python3 -m pip install -q --disable-pip-version-check --no-deps --no-compile --only-binary=:all: \
  --implementation cp --python-version 3.12 "${platforms[@]}" --target "$dest" "$dl"/*.whl 2>&1 |
  grep -v "Running pip as the 'root' user" || true
[ -d "$dest/distributed_ucxx" ] && [ -d "$dest/libucx/lib" ] || {
  echo "fetch-gpu-ucx: the install into $dest did not produce distributed_ucxx and libucx" >&2
  exit 1
}
before=$(du -sk "$dest" | cut -f1)

# ---- slimming -------------------------------------------------------------------------------
find "$dest" \( -name '*.a' -o -name '*.la' -o -name '*.pc' \) -type f -delete
rm -rf "$dest"/libucx/include "$dest"/libucx/share "$dest"/libucx/lib/cmake "$dest"/libucx/lib/pkgconfig \
  "$dest"/libucxx/include "$dest"/libucxx/lib64/cmake "$dest"/librmm/include "$dest"/librmm/lib64/cmake \
  "$dest"/rapids_logger/include "$dest"/rapids_logger/lib64/cmake "$dest"/ucxx/include \
  "$dest"/ucxx/examples "$dest"/ucxx/benchmarks
# UCX's programs but ucx_info; its perf-test plugin (and the OpenMP runtime only that needs)
find "$dest/libucx/bin" -type f ! -name ucx_info -delete
rm -f "$dest"/libucx/lib/ucx/libucx_perftest_cuda.* "$dest"/libucx_cu13.libs/libgomp-*
# test suites of the Python packages
find "$dest" -depth -type d \( -name tests -o -name tests_internal \) -exec rm -rf {} +
find "$dest" -name __pycache__ -type d -prune -exec rm -rf {} +
# One file a library, its other names links to it; then the debug sections
# go (the symbols stay: UCX finds its plugins' entry points by name).
python3 - "$dest" <<'EOF'
import filecmp, os, re, struct, subprocess, sys
from pathlib import Path

root = Path(sys.argv[1])

linked = 0
for d in sorted({p.parent for p in root.rglob("*.so*")}):
    groups = {}
    for p in d.iterdir():
        m = re.match(r"(.+?\.so)(\.[0-9.]+)?$", p.name)
        if m and p.is_file() and not p.is_symlink():
            groups.setdefault(m.group(1), []).append(p)
    for names in groups.values():
        names.sort(key=lambda p: len(p.name), reverse=True)  # the most specific name holds the file
        real = names[0]
        for other in names[1:]:
            if filecmp.cmp(real, other, shallow=False):
                other.unlink()
                other.symlink_to(real.name)
                linked += 1
print(f"fetch-gpu-ucx: {linked} copies of libraries made links")


def loads_aligned(path):
    """Every PT_LOAD segment's file offset agrees with its address modulo its
    alignment (the loader refuses the file otherwise)."""
    with open(path, "rb") as f:
        h = f.read(64)
        (phoff,) = struct.unpack_from("<Q", h, 32)
        phentsize, phnum = struct.unpack_from("<HH", h, 54)
        f.seek(phoff)
        for _ in range(phnum):
            ptype, _, off, vaddr, _, _, _, align = struct.unpack_from("<IIQQQQQQ", f.read(phentsize))
            if ptype == 1 and align > 1 and off % align != vaddr % align:
                return False
    return True


stripped, kept = 0, []
for p in sorted(root.rglob("*")):
    if p.is_symlink() or not p.is_file():
        continue
    with open(p, "rb") as f:
        if f.read(4) != b"\x7fELF":
            continue
    tmp = p.with_name(p.name + ".stripped")
    subprocess.run(["strip", "--strip-debug", "-o", str(tmp), str(p)], check=True)
    # strip moves the segments patchelf appended behind the debug sections
    # (UCX's core libraries) off their alignment: such a result would not
    # load, so those stay whole (as do files strip cannot shrink).
    if not loads_aligned(tmp):
        kept.append(p.name)
    if loads_aligned(tmp) and tmp.stat().st_size < p.stat().st_size:
        os.chmod(tmp, p.stat().st_mode)
        tmp.replace(p)
        stripped += 1
    else:
        tmp.unlink()
print(
    f"fetch-gpu-ucx: {stripped} ELF files stripped of debug sections; kept whole, as stripped they would "
    f"not load (patchelf-added segments): {', '.join(kept) or 'none'}"
)
EOF

after=$(du -sk "$dest" | cut -f1)
# What travels: the tree's bytes (links count as their few bytes)
echo "fetch-gpu-ucx: $dest $((after / 1024)) MiB (unpacked $((before / 1024)) MiB before slimming)"
for d in "$dest"/*/; do printf '  %6s  %s\n' "$(du -sh "$d" | cut -f1)" "$(basename "$d")"; done | sort -h -r | head -n 12
echo "carry it: [\"build/ucx-site\", \"build/wheels\", \"build/wheel/wheelhouse\"]; run: scripts/gpu-suite.sh ucx"
