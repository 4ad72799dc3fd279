#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang with -fsanitize=fuzzer,address,
# undefined, against the host emulation of the CUDA driver), writes seed
# corpora (cuarrow's exporters; pyarrow's when it is installed), replays the
# regression inputs of past findings (fuzz/regressions/<target>/), then runs
# each target for a bounded time, one at a time.  Exits non-zero on any
# crash, leak, sanitizer report, timeout or failed property; the input that
# caused it is kept in build/fuzz-artifacts/.
#
#   scripts/fuzz.sh                    # CI: about 60 s in all
#   scripts/fuzz.sh --seconds 900      # each target for 15 minutes
#   scripts/fuzz.sh --seconds 600 --targets "array_import schema_import"
set -euo pipefail
cd "$(dirname "$0")/.."

targets="schema_import metadata_blob array_import ipc_handle tensor_reader stream_reader ipc_codec ipc_message ipc_body ipc_stream ipc_file share_descriptor"
seconds=""
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --targets) targets=$2; shift 2 ;;
    *) echo "usage: $0 [--seconds PER_TARGET] [--targets \"t1 t2\"]" >&2; exit 2 ;;
  esac
done
n_targets=$(echo $targets | wc -w)
[ -n "$seconds" ] || seconds=$(( 60 / n_targets ))  # about a minute in all

command -v clang++ >/dev/null || CUARROW_SKIP_PYTHON=1 scripts/install-deps.sh

echo "=== fuzz: build (clang, libFuzzer + ASan + UBSan) ==="
export CC=clang CXX=clang++
cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUARROW_FUZZ=ON \
  -DCUARROW_BUILD_SHARED=OFF -DCUARROW_BUILD_TESTS=OFF -DCUARROW_BUILD_EXAMPLES=OFF >/dev/null
cmake --build build/fuzz -j "$(nproc)"

corpus=build/fuzz-corpus
mkdir -p "$corpus" build/fuzz-artifacts build/fuzz-logs
build/fuzz/bin/fuzz_write_seeds "$corpus"
if python3 -c "import pyarrow" 2>/dev/null; then python3 fuzz/seeds.py "$corpus"; fi
# ipc_message: pyarrow's streams and files (tests/ipc/make_golden.py).
mkdir -p "$corpus/ipc_message"
cp tests/ipc/data/* "$corpus/ipc_message/"
# ipc_stream: the same files, each in host (first byte 0) and device (1) memory.
mkdir -p "$corpus/ipc_stream"
for f in tests/ipc/data/*.arrow tests/ipc/data/*.arrows; do
  { printf '\000'; cat "$f"; } >"$corpus/ipc_stream/host_$(basename "$f")"
  { printf '\001'; cat "$f"; } >"$corpus/ipc_stream/device_$(basename "$f")"
done

# ipc_file: the same files read by path, whole (first byte 0) and projected
# to their first column (1); the ZSTD ones also with GPU decompression (2).
mkdir -p "$corpus/ipc_file"
for f in tests/ipc/data/*.arrow tests/ipc/data/*.arrows; do
  { printf '\000'; cat "$f"; } >"$corpus/ipc_file/whole_$(basename "$f")"
  { printf '\001'; cat "$f"; } >"$corpus/ipc_file/first_$(basename "$f")"
done
for f in tests/ipc/data/*zstd*.arrow*; do
  { printf '\002'; cat "$f"; } >"$corpus/ipc_file/gpu_$(basename "$f")"
done

export CUARROW_CUDA_DRIVER=emulated CUARROW_EMULATED_DEVICES=1
# ipc_file's GPU decompression (bit 1 of its first byte) over the host
# stand-in for libnvcomp.
[ -f build/fuzz/lib/libcuarrow_fake_nvcomp.so ] && export CUARROW_NVCOMP_LIBRARY=$PWD/build/fuzz/lib/libcuarrow_fake_nvcomp.so
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

status=0
summary=()
for t in $targets; do
  bin=build/fuzz/bin/fuzz_$t
  if [ -d "fuzz/regressions/$t" ] && [ -n "$(ls -A "fuzz/regressions/$t")" ]; then
    echo "=== fuzz: $t: regression inputs ==="
    if ! "$bin" -runs=0 "fuzz/regressions/$t"/* >"build/fuzz-logs/$t.regressions.log" 2>&1; then
      tail -40 "build/fuzz-logs/$t.regressions.log"
      echo "fuzz: $t: a regression input fails again" >&2
      status=1
    fi
  fi
  echo "=== fuzz: $t for ${seconds}s ==="
  mkdir -p "$corpus/$t"
  log=build/fuzz-logs/$t.log
  rc=0
  "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2560 -print_final_stats=1 \
    -artifact_prefix="build/fuzz-artifacts/$t-" "$corpus/$t" >"$log" 2>&1 || rc=$?
  done_line=$(grep -a -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
  execs=$(grep -a 'stat::number_of_executed_units' "$log" | awk '{print $2}' | tail -1 || true)
  # A crashed run has no DONE line: these must not end the script (pipefail).
  cov=$(echo "$done_line" | grep -o 'cov: [0-9]*' | awk '{print $2}' || true)
  ft=$(echo "$done_line" | grep -o 'ft: [0-9]*' | awk '{print $2}' || true)
  corp=$(echo "$done_line" | grep -o 'corp: [^ ]*' | awk '{print $2}' || true)
  if [ "$rc" -ne 0 ]; then
    tail -60 "$log"
    echo "fuzz: $t FAILED (exit $rc); the input is in build/fuzz-artifacts/" >&2
    status=1
    summary+=("$t: FAILED (exit $rc), see $log")
  else
    summary+=("$t: ${seconds}s, ${execs:-?} executions, cov ${cov:-?}, ft ${ft:-?}, corpus ${corp:-?}")
  fi
done

echo "=== fuzz: summary ==="
printf '  %s\n' "${summary[@]}"
exit $status
