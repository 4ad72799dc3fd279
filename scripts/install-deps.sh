#!/usr/bin/env bash
# Install what building and testing cuarrow needs on a fresh Debian machine
# that has the CUDA toolkit (headers) already: compilers (g++, and clang for
# the fuzz targets), CMake, GoogleTest, clang-format, liblz4 and libzstd
# from Debian; Python
# packages (the lint tools', the documentation site's and the wheel tools'
# pinned versions too) from PyPI.  Idempotent and
# quick when done.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cmake >/dev/null || need_apt+=(cmake)
command -v g++ >/dev/null || need_apt+=(g++)
command -v ninja >/dev/null || need_apt+=(ninja-build)
# clang with libFuzzer and the sanitizer runtimes (scripts/fuzz.sh)
command -v clang++ >/dev/null || need_apt+=(clang)
# libFuzzer's runtime is not a dependency of Debian's clang package
ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || need_apt+=(libclang-rt-dev)
[ -f /usr/include/gtest/gtest.h ] || need_apt+=(libgtest-dev)
# LZ4_FRAME and ZSTD compressed IPC bodies (src/ipc_format/codec.cpp); the
# build succeeds without them, and that codec then throws saying so
[ -f /usr/include/lz4frame.h ] || need_apt+=(liblz4-dev)
[ -f /usr/include/zstd.h ] || need_apt+=(libzstd-dev)
# scripts/wheel.sh: a fresh virtual environment (Debian's python3 has venv
# and ensurepip apart) and readelf (binutils, with g++)
python3 -c 'import ensurepip, venv' 2>/dev/null || need_apt+=(python3-venv)
command -v readelf >/dev/null || need_apt+=(binutils)
# scripts/lint.sh: Debian's clang-format is the version of its clang
command -v clang-format >/dev/null || need_apt+=(clang-format)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "[deps] apt-get install ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! ls /usr/local/cuda/include/cuda.h >/dev/null 2>&1 && ! command -v nvcc >/dev/null; then
  echo "[deps] the CUDA toolkit headers (cuda.h, cudaTypedefs.h) are needed; install the CUDA toolkit" >&2
  exit 1
fi

if [ "${CUARROW_SKIP_PYTHON:-0}" != 1 ]; then
  python3 -m pip install -q -r python/requirements-test.txt -r python/requirements-lint.txt \
    -r python/requirements-docs.txt -r python/requirements-wheel.txt
fi
