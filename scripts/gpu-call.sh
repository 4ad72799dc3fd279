#!/usr/bin/env bash
# One device call, on the GPU machine, inside a time limit: the GPU suite
# (scripts/gpu-suite.sh run), then optionally the decode-threads probe, the
# read-ahead probe and the IPC benchmark, each under `timeout` so that what
# ran comes back even when the call's limit is near.  Everything lands in
# $OUT/bundle.tgz (r/: steps.txt, lscpu.txt, suite/summary.md, suite.log,
# dt.log, decode_threads.json, ra.log, readahead.json, span.log, ib.log,
# ipc/).
#
# Here, first: scripts/gpu-suite.sh prepare; strip --strip-debug
# build/gpu/lib/*.so* build/gpu/bin/*; scripts/fetch-gpu-wheels.sh.  Then
# the device tool runs, carrying ["build/gpu/bin", "build/gpu/lib",
# "build/wheels-nvcomp", "build/wheels"]:
#
#   COMMIT=<short hash> LIMIT=560 DT=1 BUDGET=545 bash scripts/gpu-call.sh
#
# LIMIT: seconds for the whole call (default 580); SUITE=0 skips the suite
# (the package is then only built); DT=1 runs bench/decode_threads_probe.py
# (DT_CEIL, DT_THREADS: its thread counts, default 1,8,16 and 16; DT_ARGS
# adds options, e.g. --table-bytes 1G); RA=1 runs bench/readahead_probe.py
# (RA_ARGS adds options); SPAN=1 runs bench/foreign_span_probe.py in
# each of SPAN_MODES (default vmm; span.log); BUDGET:
# seconds from the start by which bench/ipc_bench.py must end (0 or unset:
# not run; IB_ARGS adds options).  Only the checkout travels, without .git:
# COMMIT names the commit in the results.
t0=$(date +%s)
LIMIT=${LIMIT:-580}
R=/tmp/r; rm -rf $R; mkdir -p $R/suite
el() { echo $(( $(date +%s) - t0 )); }
log() { echo "$(date -u +%H:%M:%S) +$(el)s $*" | tee -a $R/steps.txt; }
export CUARROW_COMMIT=${COMMIT:-unknown}
finish() { log end; tar czf "$OUT/bundle.tgz" -C /tmp r; }
trap finish EXIT
{ lscpu; nvidia-smi; free -g; uname -a; } > $R/lscpu.txt 2>&1
if [ "${SUITE:-1}" = 1 ]; then
  log "suite start ($CUARROW_COMMIT)"
  OUT=$R/suite timeout $(( LIMIT - 40 )) scripts/gpu-suite.sh run > $R/suite.log 2>&1
  log "suite rc $?"
  tail -40 $R/suite.log
else
  log "python build"
  python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/cuarrow-site . > $R/build.log 2>&1
  log "build rc $?"
fi
export PYTHONPATH=/tmp/cuarrow-site${PYTHONPATH:+:$PYTHONPATH}
# nvCOMP for the probe and the benchmark (ZSTD on the GPU): the wheel the
# suite installed (or install it here when the suite was skipped).
if [ -d build/wheels-nvcomp ]; then
  [ -d /tmp/cuarrow-nvcomp ] || python3 -m pip install -q --no-index --no-deps --target /tmp/cuarrow-nvcomp build/wheels-nvcomp/*.whl > $R/nvcomp.log 2>&1
  nvlib=/tmp/cuarrow-nvcomp/nvidia/libnvcomp/lib64/libnvcomp.so.6
  [ -e $nvlib ] && export CUARROW_NVCOMP_LIBRARY=$nvlib && log "nvcomp: $nvlib"
fi
if [ "${DT:-0}" = 1 ]; then
  t=$(( LIMIT - $(el) - 25 )); [ $t -gt 200 ] && t=200
  log "decode threads probe (timeout $t)"
  timeout $t python3 bench/decode_threads_probe.py --reps 3 --ceiling-threads ${DT_CEIL:-1,8,16} --threads ${DT_THREADS:-16} ${DT_ARGS:-} --out $R/decode_threads.json > $R/dt.log 2>&1
  log "dt rc $?"; tail -30 $R/dt.log
fi
if [ "${RA:-0}" = 1 ]; then
  t=$(( LIMIT - $(el) - 25 )); [ $t -gt 150 ] && t=150
  log "readahead probe (timeout $t)"
  timeout $t python3 bench/readahead_probe.py --reps 3 ${RA_ARGS:-} --out $R/readahead.json > $R/ra.log 2>&1
  log "ra rc $?"; tail -12 $R/ra.log
fi
if [ "${SPAN:-0}" = 1 ]; then
  t=$(( LIMIT - $(el) - 25 )); [ $t -gt 90 ] && t=90
  for m in ${SPAN_MODES:-vmm}; do
    log "foreign span probe, $m (timeout $t)"
    timeout $t python3 bench/foreign_span_probe.py $m >> $R/span.log 2>&1
    log "span rc $?"
  done
  tail -40 $R/span.log
fi
if [ "${BUDGET:-0}" -gt 0 ]; then
  t=$(( BUDGET - $(el) )); [ $t -gt $(( LIMIT - $(el) - 15 )) ] && t=$(( LIMIT - $(el) - 15 ))
  log "ipc_bench (timeout $t) ${IB_ARGS:-}"
  timeout $t python3 bench/ipc_bench.py --dir /dev/shm --reps 3 --out $R/ipc ${IB_ARGS:-} > $R/ib.log 2>&1
  log "ib rc $?"; tail -60 $R/ib.log
fi
