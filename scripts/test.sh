#!/usr/bin/env bash
# Every test that runs without a GPU, against the host emulation of the CUDA
# driver: first the style and type checks (scripts/lint.sh: ruff, mypy),
# then the C++ suite (warnings as errors), the same suite under
# AddressSanitizer + UndefinedBehaviorSanitizer, the core and IPC suites
# under ThreadSanitizer, a short run of every fuzz
# target (scripts/fuzz.sh), the wheel (built from the sdist, repaired by
# auditwheel and smoke-tested alone in a fresh virtual environment:
# scripts/wheel.sh), the Python suite against that wheel (and that the
# binding's committed stub is the installed extension's), and the
# documentation site (scripts/docs.sh: warnings as errors, its examples as
# doctests).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)

echo "=== Lint: ruff, mypy (scripts/lint.sh) ==="
scripts/lint.sh

echo "=== C++: build and test (emulated driver) ==="
cmake -S . -B build/test -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUARROW_WARNINGS_AS_ERRORS=ON >/dev/null
cmake --build build/test -j "$jobs"
ctest --test-dir build/test --output-on-failure -j "$jobs" --timeout 300

echo "=== C++: AddressSanitizer + UndefinedBehaviorSanitizer ==="
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCUARROW_SANITIZE=address,undefined \
  -DCUARROW_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build/asan -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build/asan --output-on-failure -j "$jobs" --timeout 600

echo "=== C++: ThreadSanitizer over the suites whose work spans threads ==="
# The core suite (the staging pipeline's workers, pools, streams from many
# threads) and the IPC suite (file readers: metadata, building and checks
# of many batches on the reader's threads, the pipeline's captures).
cmake -S . -B build/tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUARROW_SANITIZE=thread \
  -DCUARROW_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build/tsan -j "$jobs" --target cuarrow_test cuarrow_ipc_test cuarrow_arrow_test cuarrow_cuda_emulation
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
CUARROW_CUDA_DRIVER=emulated CUARROW_EMULATED_DEVICES=2 build/tsan/bin/cuarrow_test --gtest_brief=1
CUARROW_CUDA_DRIVER=emulated CUARROW_EMULATED_DEVICES=1 build/tsan/bin/cuarrow_ipc_test --gtest_brief=1
# The typed layer's threads: the host stream moved ahead on a thread of its own.
CUARROW_CUDA_DRIVER=emulated CUARROW_EMULATED_DEVICES=1 build/tsan/bin/cuarrow_arrow_test --gtest_brief=1 \
  --gtest_filter='ArrowDeviceReadahead.*'
unset TSAN_OPTIONS

echo "=== Fuzzing: every parser of outside bytes, about a minute in all ==="
scripts/fuzz.sh

if [ -f pyproject.toml ]; then
  echo "=== Wheel: sdist -> wheel -> auditwheel repair -> fresh venv smoke test (scripts/wheel.sh) ==="
  scripts/wheel.sh

  # The suite runs against that same wheel (one build of the extension, not
  # two): what users install.
  echo "=== Python: install the wheel, test (emulated driver) ==="
  python3 -m pip install -q --force-reinstall --no-deps build/wheel/wheelhouse/cuarrow-*.whl
  scripts/lint.sh stub
  CUARROW_CUDA_DRIVER=emulated CUARROW_EMULATED_DEVICES=2 python3 -m pytest -q python/tests

  echo "=== Docs: the site (docs/site/), warnings as errors, its examples as doctests ==="
  scripts/docs.sh
fi
