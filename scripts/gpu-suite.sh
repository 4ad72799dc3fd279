#!/usr/bin/env bash
# The whole GPU suite, in one command on the GPU machine.
#
#   scripts/gpu-suite.sh prepare   (here, on a machine with GoogleTest and nvcc)
#       builds the C++ test binaries, and the nvcc-compiled kernel test, into
#       build/gpu; the GPU machine has no GoogleTest, so they travel with the
#       checkout (device tool: carry ["build/gpu/bin", "build/gpu/lib"]).
#   scripts/gpu-suite.sh run       (on the GPU machine; CUARROW_COMMIT names the commit when .git is absent)
#       runs the C++ suite against the real driver, the GPU-only tests, the
#       walkthrough, then builds the Python package there (for its Python)
#       and runs the Python suite and the page's doctest.  Prints a summary
#       and writes it to $OUT/summary.md (or build/gpu-out/summary.md).
#       The machine has no Dask and no registry: when build/wheels is there
#       (made here by scripts/fetch-gpu-wheels.sh, ~5 MiB; carry it too:
#       ["build/gpu/bin", "build/gpu/lib", "build/wheels"]), the wheels the
#       machine lacks go into /tmp/cuarrow-deps (scripts/install-wheels.py),
#       on PYTHONPATH after cuarrow's site, so that the Dask tests of
#       python/tests/test_share.py run there (without it they are skipped).
#   scripts/gpu-suite.sh run --bench
#       the same, then the transfer benchmark (bench/bench.py) and the IPC /
#       Feather benchmark (bench/ipc_bench.py, its files in /tmp) with the
#       package built there; their results go to $OUT/bench and
#       $OUT/ipc-bench (CUARROW_BENCH_ARGS and CUARROW_IPC_BENCH_ARGS add
#       options to each); then the pool IPC probe (bench/pool_ipc_probe.cpp,
#       built by prepare): $OUT/pool_ipc_probe.json, and the gather
#       kernel probe (bench/gather_probe.cu, built by prepare where nvcc
#       is): $OUT/gather_probe.json; then, with Dask
#       installed from build/wheels, the Dask benchmark (bench/dask_bench.py:
#       a 1 GiB DeviceTable against a 1 GiB NumPy array between two workers
#       over TCP) to $OUT/dask-bench, and the sharing benchmark
#       (bench/share_bench.py: share() / open_shared of 1 GiB in 100
#       columns) to $OUT/share-bench (CUARROW_DASK_BENCH_ARGS and
#       CUARROW_SHARE_BENCH_ARGS add options).
#   scripts/gpu-suite.sh wheel     (on the GPU machine, carrying build/wheel/wheelhouse)
#       the wheel made here by PYTHON=python3.12 scripts/wheel.sh (that
#       Python needs python/requirements-wheel.txt, scikit-build-core and
#       nanobind installed; the GPU machine's Python is 3.12), installed
#       alone into a fresh venv, then the walkthrough, `cuarrow info` (and
#       --json), `cuarrow bench --quick` and the Python suite against it:
#       $OUT/summary.md, cuarrow-info.json, cuarrow-info.txt,
#       cuarrow-bench-quick.txt.
#   scripts/gpu-suite.sh ucx       (on the GPU machine, carrying build/ucx-site,
#                                   build/wheels [and build/wheel/wheelhouse])
#       Dask over UCX (issue 15): the cuarrow wheel in a fresh venv as `wheel`
#       makes it (without a wheel that installs, the package built there, as
#       `run` does), the Dask set from build/wheels (install-wheels.py, into
#       /tmp/cuarrow-ucx-deps) and build/ucx-site (distributed-ucxx and the
#       RAPIDS libraries, made here by scripts/fetch-gpu-ucx.sh) on
#       PYTHONPATH; then `ucx_info`, scripts/ucx-check.py (versions,
#       requirements, a two-worker UCX cluster moving a NumPy array, a
#       DeviceTable and a CuPy array; again with UCX_PROTO_INFO=y, the
#       protocols UCX chose to $OUT/ucx-proto-info.log, unless
#       CUARROW_UCX_PROTO_INFO=0), test_share.py's Dask tests with
#       CUARROW_DASK_PROTOCOL=ucx (and its UCX test), and
#       bench/dask_bench.py --protocol ucx (to $OUT/ucx-bench;
#       CUARROW_UCX_BENCH_ARGS adds options).  UCX_TLS defaults to
#       tcp,sm,self,cuda_copy,cuda_ipc (set it to change; UCX_TLS=all lets
#       UCX choose).  Every step runs under `timeout` within one budget
#       (CUARROW_UCX_BUDGET, default 230 s) so that a hang cannot eat the
#       call: $OUT/ucx-summary.md (with the benchmark's summary) and
#       $OUT/gpu-suite.log.
#   scripts/gpu-suite.sh sanitize [gpu-sanitize.py options]
#       builds the Python package there, then runs compute-sanitizer
#       (memcheck with leak checking, racecheck, synccheck, initcheck) over
#       the C++ suites, the kernel test and the Python suite, several runs
#       at a time: $OUT/sanitize.md and $OUT/sanitize-logs.tar.gz.
#   scripts/gpu-suite.sh soak-start [SECONDS]   (default 600)
#       builds the Python package there, then starts the soak test
#       (python/tests/soak.py: 16 threads of random checked operations,
#       resources compared with the start) in the background, detached, so
#       that it outlives the command; its output goes to build/soak-out.
#       Meant as: scripts/gpu-suite.sh soak-start 600 && scripts/gpu-suite.sh run
#   scripts/gpu-suite.sh soak-report
#       waits for that soak to finish (up to CUARROW_SOAK_WAIT seconds,
#       default 570), then copies its report, log and summary to $OUT
#       (soak.json, soak.log, soak-summary.md); exits with the soak's status.
#   scripts/gpu-suite.sh soak [SECONDS]
#       the same soak in the foreground, its files to $OUT.
#   (CUARROW_SOAK_THREADS, default 16, and CUARROW_SOAK_SEED, default the
#   time, choose the threads and the seed.)
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-run}

if [ "$mode" = prepare ]; then
  set -e
  CUARROW_SKIP_PYTHON=1 scripts/install-deps.sh
  cuda_tests=OFF
  command -v nvcc >/dev/null && cuda_tests=ON
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUARROW_BUILD_CUDA_TESTS=$cuda_tests \
    -DCUARROW_BUILD_PROBES=ON >/dev/null
  cmake --build build/gpu -j "$(nproc)"
  # Only what runs there travels, without debug sections or symbol tables
  # (the libraries keep their dynamic symbols): the device tool carries at
  # most 64 MiB with the checkout, and with the nvCOMP and Dask wheels the
  # binaries stripped of debug sections only came to about 65.
  rm -f build/gpu/bin/cuarrow_emulation_test
  strip --strip-all build/gpu/bin/* 2>/dev/null || true
  strip --strip-unneeded build/gpu/lib/*.so.* 2>/dev/null || true
  echo "built build/gpu; now run: scripts/gpu-suite.sh run   (on the GPU machine, carrying build/gpu)"
  exit 0
fi

out=${OUT:-build/gpu-out}
mkdir -p "$out"

# The Python package, built here for this machine's Python, into a private
# --target site (never the system's site-packages), then put on PYTHONPATH.
install_python() {  # install_python SITE
  rm -rf "$1"
  python3 -m pip install --no-build-isolation --no-deps --no-compile -q --target "$1" .
}
use_python() {  # use_python SITE
  export PYTHONPATH="$1${PYTHONPATH:+:$PYTHONPATH}"
}

if [ "$mode" = sanitize ]; then
  unset CUARROW_CUDA_DRIVER
  install_python /tmp/cuarrow-site || exit 1
  use_python /tmp/cuarrow-site
  shift
  exec python3 scripts/gpu-sanitize.py --out "$out" "$@"
fi

# The soak has its own site and output folder: the suite ('run') rebuilds
# /tmp/cuarrow-site while a background soak may still be importing from its own.
soak_out=build/soak-out
soak_site=$PWD/build/soak-site
soak_collect() {  # soak_collect RC: the soak's files into $out, its summary printed
  cp "$soak_out/soak.json" "$soak_out/soak.log" "$out/" 2>/dev/null
  if [ -f "$soak_out/soak-summary.md" ]; then
    cp "$soak_out/soak-summary.md" "$out/"
    cat "$soak_out/soak-summary.md"
  else
    echo "# Soak: no summary (exit status $1); the log's end:" | tee "$out/soak-summary.md"
    tail -n 60 "$soak_out/soak.log" | tee -a "$out/soak-summary.md"
  fi
  echo "soak exit status: $1"
}
if [ "$mode" = soak-start ] || [ "$mode" = soak ]; then
  unset CUARROW_CUDA_DRIVER
  secs=${2:-600}
  if [ -f "$soak_out/pid" ] && [ ! -f "$soak_out/rc" ] && kill -0 "$(cat "$soak_out/pid")" 2>/dev/null; then
    echo "a soak is already running (pid $(cat "$soak_out/pid")); collect it with: scripts/gpu-suite.sh soak-report"
    exit 1
  fi
  rm -rf "$soak_out"
  mkdir -p "$soak_out"
  if ! install_python "$soak_site" >"$soak_out/build.log" 2>&1; then
    cat "$soak_out/build.log"
    exit 1
  fi
  use_python "$soak_site"
  cmd=(python3 python/tests/soak.py --seconds "$secs" --threads "${CUARROW_SOAK_THREADS:-16}"
       --seed "${CUARROW_SOAK_SEED:-$(date +%s)}" --json "$soak_out/soak.json" --summary "$soak_out/soak-summary.md")
  if [ "$mode" = soak ]; then
    "${cmd[@]}" 2>&1 | tee "$soak_out/soak.log"
    rc=${PIPESTATUS[0]}
    echo "$rc" >"$soak_out/rc"
    soak_collect "$rc" >/dev/null
    exit "$rc"
  fi
  # Detached (own session, no terminal, no inherited pipes): it keeps
  # running after this command returns; rc appears when it ends.
  setsid nohup bash -c '"$@" >"'"$soak_out"'/soak.log" 2>&1; echo $? >"'"$soak_out"'/rc"' soak "${cmd[@]}" \
    </dev/null >/dev/null 2>&1 &
  echo $! >"$soak_out/pid"
  sleep 5
  echo "soak started (pid $(cat "$soak_out/pid"), ${secs} s after a warm-up of up to 30 s), writing $soak_out;"
  echo "collect it with: scripts/gpu-suite.sh soak-report"
  head -n 5 "$soak_out/soak.log"
  exit 0
fi
if [ "$mode" = soak-report ]; then
  if [ ! -f "$soak_out/pid" ]; then
    echo "no soak was started here (no $soak_out/pid); start one with: scripts/gpu-suite.sh soak-start [SECONDS]"
    exit 1
  fi
  waited=0
  while [ ! -f "$soak_out/rc" ] && [ "$waited" -lt "${CUARROW_SOAK_WAIT:-570}" ]; do
    if ! kill -0 "$(cat "$soak_out/pid")" 2>/dev/null; then
      sleep 2  # it may just be writing rc
      [ -f "$soak_out/rc" ] || echo 137 >"$soak_out/rc"  # gone without a status: killed
      break
    fi
    sleep 5
    waited=$((waited + 5))
  done
  if [ ! -f "$soak_out/rc" ]; then
    echo "the soak is still running after ${waited} s of waiting; its log so far:"
    tail -n 20 "$soak_out/soak.log"
    cp "$soak_out/soak.log" "$out/" 2>/dev/null
    exit 3
  fi
  rc=$(cat "$soak_out/rc")
  soak_collect "$rc"
  exit "$rc"
fi
summary="$out/summary.md"
[ "$mode" = ucx ] && summary="$out/ucx-summary.md"
summary_extra=()            # files write_summary appends (the UCX benchmark's summary)
log="$out/gpu-suite.log"   # every step's whole output
steps=$(mktemp -d)          # one log a step (the device tool returns few files)
: >"$log"
unset CUARROW_CUDA_DRIVER
results=()

step() {  # step NAME COMMAND...: run, keep the log, record the closing line
  local name=$1; shift
  echo "=== $name ===" | tee -a "$log"
  local t0=$(date +%s)
  "$@" >"$steps/$name.log" 2>&1
  local rc=$?
  cat "$steps/$name.log" >>"$log"
  local closing
  closing=$(grep -E "PASSED|FAILED|passed|failed|skipped|error" "$steps/$name.log" | tail -n 3 | tr '\n' ' ')
  results+=("| $name | $([ $rc -eq 0 ] && echo pass || echo "FAIL (rc $rc)") | $(( $(date +%s) - t0 )) s | ${closing//|//} |")
  tail -n 15 "$steps/$name.log"
  return 0
}

{
  echo "# GPU suite run$([ "$mode" = ucx ] && echo ": Dask over UCX")"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "- commit: ${CUARROW_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
  echo "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv,noheader 2>/dev/null | head -n 4 | tr '\n' ';')"
  echo "- host: $(nproc) cores, $(uname -r), $(python3 --version 2>&1)"
} >"$summary.head"

write_summary() {  # the summary of the steps run, to $out/summary.md and stdout
  {
    cat "$summary.head"
    echo
    echo "| step | result | time | closing lines |"
    echo "| --- | --- | --- | --- |"
    printf '%s\n' "${results[@]}"
    echo
    echo "Figures printed by the GPU-only tests:"
    echo
    grep -h "^\[figure\]" "$steps"/*.log 2>/dev/null | sed 's/^/    /'
    for f in "${summary_extra[@]}"; do
      [ -f "$f" ] && { echo; cat "$f"; }
    done
  } >"$summary"
  rm -f "$summary.head"
  echo
  cat "$summary"
}

# The wheel built on the CI-like machine (PYTHON=python3.12 scripts/wheel.sh:
# a cp312-abi3 wheel; carry build/wheel/wheelhouse), installed with nothing
# else into a fresh venv VENV that sees this machine's numpy and pyarrow
# (--system-site-packages and the packages of the python3 it was made from;
# no build tools, no registry).  Fails (a NOT RUN
# or FAIL line in the summary) when there is no wheel whose tags this Python
# accepts, or it does not import.
wheel_venv() {  # wheel_venv VENV
  local whl
  whl=$(python3 - <<'EOF'
import glob
from pip._vendor.packaging.tags import sys_tags
from pip._vendor.packaging.utils import parse_wheel_filename

accepted = set(sys_tags())
for w in sorted(glob.glob("build/wheel/wheelhouse/cuarrow-*.whl")):
    if accepted & set(parse_wheel_filename(w.rsplit("/", 1)[-1])[3]):
        print(w)
        break
EOF
  )
  if [ -z "$whl" ]; then
    local have
    have=$(cd build/wheel/wheelhouse 2>/dev/null && ls cuarrow-*.whl 2>/dev/null | tr '\n' ' ')
    results+=("| wheel | NOT RUN: no cuarrow wheel for $(python3 -V) in build/wheel/wheelhouse (${have:-none}; build it: PYTHON=python3.12 scripts/wheel.sh; carry build/wheel/wheelhouse) | | |")
    return 1
  fi
  rm -rf "$1"
  unset PYTHONPATH
  step wheel-venv python3 -m venv --system-site-packages "$1"
  # This machine's python3 is itself a venv (/opt/torch/.venv), whose
  # packages --system-site-packages does not reach (it reaches the base
  # interpreter's): a .pth puts them behind the new venv's own site, so the
  # wheel's cuarrow comes first and numpy, pyarrow, pytest are this machine's.
  python3 -c 'import site; print("\n".join(site.getsitepackages()))' \
    >"$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/_machine_site.pth"
  step wheel-install "$1/bin/python" -m pip install --no-index --no-deps --ignore-installed "$whl"
  "$1/bin/python" -c "import cuarrow" >/dev/null 2>&1
}

if [ "$mode" = wheel ]; then
  # Issue 16: the wheel alone in a fresh venv (wheel_venv), then the
  # walkthrough, `cuarrow info` (also as JSON, to $out), `cuarrow bench
  # --quick` and the Python suite against it.
  venv=/tmp/cuarrow-wheel-venv
  if wheel_venv "$venv"; then
    step wheel-info "$venv/bin/cuarrow" info
    step wheel-info-json bash -c "set -o pipefail; '$venv/bin/cuarrow' info --json | tee '$out/cuarrow-info.json'"
    step wheel-bench-quick "$venv/bin/cuarrow" bench --quick
    step wheel-demo "$venv/bin/python" -m cuarrow.demo
    step wheel-python-suite "$venv/bin/python" -m pytest -q -rs python/tests -p no:cacheprovider
    cp "$steps/wheel-info.log" "$out/cuarrow-info.txt" 2>/dev/null
    cp "$steps/wheel-bench-quick.log" "$out/cuarrow-bench-quick.txt" 2>/dev/null
  fi
  write_summary
  exit 0
fi

if [ "$mode" = ucx ]; then
  # Issue 15, Dask over UCX: see the head of this file.  One budget for the
  # whole mode; each step's timeout is what is left of it, at most its own.
  deadline=$(($(date +%s) + ${CUARROW_UCX_BUDGET:-230}))
  within() {  # within SECONDS: the timeout for a step, never past the deadline
    local left=$((deadline - $(date +%s) - 5))
    echo $((left < $1 ? (left < 1 ? 1 : left) : $1))
  }
  missing=()
  [ -d build/ucx-site/distributed_ucxx ] || missing+=("build/ucx-site (scripts/fetch-gpu-ucx.sh)")
  [ -d build/wheels ] || missing+=("build/wheels (scripts/fetch-gpu-wheels.sh)")
  if [ ${#missing[@]} -gt 0 ]; then
    results+=("| ucx | NOT RUN: missing ${missing[*]}; make them here and carry them with build/wheel/wheelhouse | | |")
    write_summary
    exit 1
  fi
  if wheel_venv /tmp/cuarrow-ucx-venv; then
    py=/tmp/cuarrow-ucx-venv/bin/python
  else
    # No wheel that installs for this Python: the package built here (a few minutes of the budget)
    step python-build install_python /tmp/cuarrow-site
    use_python /tmp/cuarrow-site
    py=python3
  fi
  step ucx-dask-wheels "$py" scripts/install-wheels.py build/wheels /tmp/cuarrow-ucx-deps
  # after cuarrow (the venv's site, or /tmp/cuarrow-site in front): the Dask
  # set, then the UCX site (no package in both)
  export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}/tmp/cuarrow-ucx-deps:$PWD/build/ucx-site"
  export UCX_TLS=${UCX_TLS:-tcp,sm,self,cuda_copy,cuda_ipc} UCX_WARN_UNUSED_ENV_VARS=${UCX_WARN_UNUSED_ENV_VARS:-n}
  export PYTHONUNBUFFERED=1
  ucx_bin=build/ucx-site/libucx/bin/ucx_info
  # UCX's version and the transports it finds (cuda_copy and cuda_ipc need the
  # driver); the shared-memory transports need room in /dev/shm
  step ucx-info bash -c "export LD_LIBRARY_PATH=$PWD/build/ucx-site/libucx/lib; timeout 30 $ucx_bin -v &&
    timeout 30 $ucx_bin -d | grep -E 'Memory domain|Transport|Device:' | sort | uniq -c; df -h /dev/shm | tail -n 1"
  step ucx-check timeout "$(within 90)" "$py" scripts/ucx-check.py build/ucx-site
  if [ "${CUARROW_UCX_PROTO_INFO:-1}" != 0 ]; then
    # The same moves with UCX_PROTO_INFO=y: UCX prints the protocols it
    # chose (is cuda_ipc used for the DeviceTable's frame, or a staged
    # pipeline?), all of it to $out/ucx-proto-info.log (at most 2 MB), the
    # distinct tables about device memory into the step's log
    step ucx-proto-info bash -c "set -o pipefail; UCX_PROTO_INFO=y timeout $(within 60) '$py' scripts/ucx-check.py \
      build/ucx-site 2>&1 | head -c 2000000 >'$out/ucx-proto-info.log'; rc=\$?;
      '$py' scripts/ucx-check.py --proto-summary '$out/ucx-proto-info.log' | head -n 80; exit \$rc"
  fi
  step ucx-dask-tests env CUARROW_DASK_PROTOCOL=ucx timeout "$(within 100)" "$py" -m pytest -q -rs \
    python/tests/test_share.py -k "dask or cluster or ucx or family" -p no:cacheprovider
  # shellcheck disable=SC2086 # options, split on purpose
  step ucx-benchmark timeout "$(within 150)" "$py" bench/dask_bench.py --protocol ucx --out "$out/ucx-bench" \
    ${CUARROW_UCX_BENCH_ARGS:-}
  summary_extra+=("$out/ucx-bench/summary.md")
  write_summary
  exit 0
fi

bin=build/gpu/bin
if [ -x $bin/cuarrow_test ]; then
  step cpp-suite-real-driver $bin/cuarrow_test
  step cpp-gpu-only $bin/cuarrow_gpu_test
  step cpp-suite-emulated env CUARROW_CUDA_DRIVER=emulated CUARROW_EMULATED_DEVICES=2 $bin/cuarrow_test
  [ -x $bin/cuarrow_arrow_test ] && step cpp-arrow-real-driver $bin/cuarrow_arrow_test
  [ -x $bin/cuarrow_arrow_batching_test ] && step cpp-arrow-batching-real-driver $bin/cuarrow_arrow_batching_test
  if [ -x $bin/cuarrow_arrow_kernel_test ]; then
    step cuda-kernels-over-device-views $bin/cuarrow_arrow_kernel_test
  else
    results+=("| cuda-kernels-over-device-views | NOT RUN: built only where nvcc is (prepare) | | |")
  fi
  # The Arrow IPC format: bodies, streams and files in device memory on the
  # real driver; metadata and codecs are host code (run once, as in CI).
  [ -x $bin/cuarrow_ipc_test ] && step cpp-ipc-real-driver $bin/cuarrow_ipc_test
  [ -x $bin/cuarrow_ipc_format_test ] && step cpp-ipc-metadata $bin/cuarrow_ipc_format_test
  [ -x $bin/cuarrow_ipc_codec_test ] && step cpp-ipc-codecs $bin/cuarrow_ipc_codec_test
  step walkthrough-cpp $bin/cuarrow_walkthrough
else
  results+=("| C++ suites | NOT RUN: build/gpu missing (run 'scripts/gpu-suite.sh prepare' here and carry build/gpu) | | |")
fi

if [ -f pyproject.toml ]; then
  step python-build install_python /tmp/cuarrow-site
  if [ -d build/wheels ]; then
    # Behind cuarrow's site on the path (use_python puts each in front).
    step dask-wheels python3 scripts/install-wheels.py build/wheels /tmp/cuarrow-deps
    use_python /tmp/cuarrow-deps
  fi
  if [ -d build/wheels-nvcomp ]; then
    # nvCOMP 6 from its wheel, found by the package as a user's would be;
    # the C++ readers' GPU decompression runs over the real library too
    # (not Nvcomp.Corrupt*: nvCOMP 6.0 faults on a corrupt frame, an illegal
    # address that ends the process's use of the device, as its
    # documentation allows; that test is of the fake's error status, and
    # the Python suite checks the real library's outcome in a child).
    step nvcomp-wheel python3 -m pip install -q --no-index --no-deps --target /tmp/cuarrow-nvcomp build/wheels-nvcomp/*.whl
    use_python /tmp/cuarrow-nvcomp
    nvlib=/tmp/cuarrow-nvcomp/nvidia/libnvcomp/lib64/libnvcomp.so.6
    [ -x $bin/cuarrow_nvcomp_test ] && step cpp-nvcomp-real-library env CUARROW_NVCOMP_LIBRARY=$nvlib \
      $bin/cuarrow_nvcomp_test "--gtest_filter=Nvcomp.Fake*:Nvcomp.Pyarrow*:Nvcomp.Many*:Nvcomp.Lz4*"
  fi
  use_python /tmp/cuarrow-site
  [ -d build/wheels-nvcomp ] && step nvcomp-status python3 -c "from cuarrow import ipc; print(ipc.nvcomp_status())"
  # CUARROW_PYTEST_PATHS: a part of the Python suite (files or node ids)
  # for a short call after a change the whole run already covered; the
  # summary's python-suite line then says how many ran.
  step python-suite python3 -m pytest -q -rs ${CUARROW_PYTEST_PATHS:-python/tests} -p no:cacheprovider
  step python-demo python3 -m cuarrow.demo
  if [ "${2:-}" = --bench ]; then
    step benchmark python3 bench/bench.py --out "$out/bench" ${CUARROW_BENCH_ARGS:-}
    step ipc-benchmark python3 bench/ipc_bench.py --out "$out/ipc-bench" ${CUARROW_IPC_BENCH_ARGS:-}
    # What an IPC-capable pool costs against the default pool (issue 15).
    [ -x $bin/cuarrow_pool_ipc_probe ] && step pool-ipc-probe $bin/cuarrow_pool_ipc_probe --out "$out/pool_ipc_probe.json"
    # The gather kernel against the copy engines (issue 14's stream into
    # device memory; a few seconds).
    [ -x $bin/cuarrow_gather_probe ] && step gather-probe $bin/cuarrow_gather_probe --out "$out/gather_probe.json"
    # Issue 15: Dask between two worker processes, and share() / open_shared
    # (about half a minute and a few seconds; the timeouts only stop a hang).
    if python3 -c "import distributed" 2>/dev/null; then
      step dask-benchmark timeout 240 python3 bench/dask_bench.py --out "$out/dask-bench" ${CUARROW_DASK_BENCH_ARGS:-}
    else
      results+=("| dask-benchmark | NOT RUN: no distributed (carry build/wheels: scripts/fetch-gpu-wheels.sh) | | |")
    fi
    step share-benchmark timeout 120 python3 bench/share_bench.py --repeat 10 --out "$out/share-bench" ${CUARROW_SHARE_BENCH_ARGS:-}
  fi
fi

write_summary
