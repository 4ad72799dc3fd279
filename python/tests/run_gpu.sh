#!/usr/bin/env bash
# Build and install cuarrow's Python package on the GPU machine (offline:
# scikit-build-core and nanobind are installed there) and run the whole
# Python suite, GPU-only tests included, then the demo.
#   bash python/tests/run_gpu.sh [pytest args...]
set -uo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python3}"
LOG="${OUT:-/tmp}/cuarrow-pip.log"
echo "python: $(command -v "$PY") ($("$PY" --version 2>&1)), $(nproc) cores"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null || true
start=$(date +%s)
if ! CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "$PY" -m pip install --no-build-isolation --no-deps . \
      -Cbuild-dir=build/gpu-py >"$LOG" 2>&1; then
  tail -60 "$LOG"
  echo "build failed (log: $LOG)"
  exit 1
fi
echo "built and installed in $(( $(date +%s) - start ))s"
unset CUARROW_CUDA_DRIVER
status=0
echo "---- demo (full output: ${OUT:-/tmp}/cuarrow-demo.log) ----"
"$PY" -m cuarrow.demo >"${OUT:-/tmp}/cuarrow-demo.log" 2>&1 || status=$?
tail -4 "${OUT:-/tmp}/cuarrow-demo.log"
echo "---- pytest ----"
"$PY" -m pytest python/tests -q -p no:cacheprovider -rfEs -W ignore::DeprecationWarning "$@" || status=$?
exit $status
