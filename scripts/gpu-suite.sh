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
#   scripts/gpu-suite.sh run --bench
#       the same, then the transfer benchmark (bench/bench.py) with the
#       package built there; its results go to $OUT/bench.
#   scripts/gpu-suite.sh sanitize [gpu-sanitize.py options]
#       builds the Python package there, then runs compute-sanitizer
#       (memcheck with leak checking, racecheck, synccheck, initcheck) over
#       the C++ suites, the kernel test and the Python suite, several runs
#       at a time: $OUT/sanitize.md and $OUT/sanitize-logs.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-run}

if [ "$mode" = prepare ]; then
  set -e
  CUARROW_SKIP_PYTHON=1 scripts/install-deps.sh
  cuda_tests=OFF
  command -v nvcc >/dev/null && cuda_tests=ON
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUARROW_BUILD_CUDA_TESTS=$cuda_tests >/dev/null
  cmake --build build/gpu -j "$(nproc)"
  # Only what runs there travels, without debug sections: the device tool
  # carries at most 64 MiB with the checkout.
  rm -f build/gpu/bin/cuarrow_emulation_test
  strip --strip-debug build/gpu/bin/* build/gpu/lib/*.so.* 2>/dev/null || true
  echo "built build/gpu; now run: scripts/gpu-suite.sh run   (on the GPU machine, carrying build/gpu)"
  exit 0
fi

out=${OUT:-build/gpu-out}
mkdir -p "$out"

if [ "$mode" = sanitize ]; then
  unset CUARROW_CUDA_DRIVER
  site=/tmp/cuarrow-site
  rm -rf "$site"
  python3 -m pip install --no-build-isolation --no-deps --no-compile -q --target "$site" . || exit 1
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  shift
  exec python3 scripts/gpu-sanitize.py --out "$out" "$@"
fi
summary="$out/summary.md"
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
  echo "# GPU suite run"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "- commit: ${CUARROW_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
  echo "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv,noheader 2>/dev/null | head -n 4 | tr '\n' ';')"
  echo "- host: $(nproc) cores, $(uname -r), $(python3 --version 2>&1)"
} >"$summary.head"

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
  step walkthrough-cpp $bin/cuarrow_walkthrough
else
  results+=("| C++ suites | NOT RUN: build/gpu missing (run 'scripts/gpu-suite.sh prepare' here and carry build/gpu) | | |")
fi

if [ -f pyproject.toml ]; then
  site=/tmp/cuarrow-site
  rm -rf "$site"
  step python-build python3 -m pip install --no-build-isolation --no-deps --no-compile -q --target "$site" .
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  step python-suite python3 -m pytest -q -rs python/tests -p no:cacheprovider
  step python-demo python3 -m cuarrow.demo
  if [ "${2:-}" = --bench ]; then
    step benchmark python3 bench/bench.py --out "$out/bench" ${CUARROW_BENCH_ARGS:-}
  fi
fi

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
} >"$summary"
rm -f "$summary.head"
echo
cat "$summary"
