#!/usr/bin/env bash
# The main job: install the cuarrow Python package from this checkout and walk
# through the Arrow "CUDA Integration" page with cuarrow.cuda on GPU 0 (on a
# machine without a GPU: on the host emulation of the CUDA driver, with a
# banner saying so).  The C++ walkthrough: build/release/bin/cuarrow_walkthrough
# after `cmake -S . -B build/release && cmake --build build/release`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
python3 -m pip install -q .
exec python3 -m cuarrow.demo
