#!/usr/bin/env bash
# The main job: build cuarrow and run the walkthrough on GPU 0, or on the
# host emulation of the CUDA driver (with a banner) when there is no GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
CUARROW_SKIP_PYTHON=1 scripts/install-deps.sh
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release -DCUARROW_BUILD_TESTS=OFF >/dev/null
cmake --build build/release
exec build/release/bin/cuarrow_walkthrough
