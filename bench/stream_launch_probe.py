#!/usr/bin/env python3
"""When an IPC stream written into device memory queues its first copy:
ipc_bench's stream case (``w = ipc.new_stream(ctx, schema);
w.write_table(t); w.close()``) under a driver that records the time of
every launch, copy, allocation and wait (bench/driver_trace.c, compiled
here and put in front of the real driver), against the Python call's own
clock.  Issue 14 asks for 0.9 x raw device-to-device: the copies take the
gather kernel about 0.93 x raw, so what the host spends before the first
launch decides it.

    PYTHONPATH=<installed cuarrow> python3 bench/stream_launch_probe.py [--table-bytes 2.2G] [--batches 0] [--reps 21]

(CUARROW_TRACE_SO: the tracing driver built already, where there is no cc.)

--gpu-timing also times each kernel launch on the GPU (events before and
after it on its stream): how long the gather kernel ran for the stream's
parts and how long the GPU waited between them, which the host's clock
cannot say.  The events cost the host a driver call each, so the host's
figures of such a run are a little slower; run without it for those.

Prints, as medians over --reps calls: when the first launch starts and
the driver calls before it (each call's start), the parts of the call
(new_stream, write_table, close), the last launch's end and close()'s
wait; with CuPy (the GPU machine), the stream's time against a raw
device-to-device copy of as many bytes.  --batches N builds the table in N
parts, a batch each (0: 2^21 rows a part, ipc_bench's 8 for 2.2 GB).  On the
driver emulation (CUARROW_CUDA_DRIVER=emulated) the copies are memcpys
on a host thread: only the host's times mean something there.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench import parse_size  # noqa: E402 - found through the line above

TRACED_ENV = "CUARROW_TRACE_DRIVER"


class Event(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("start_ns", ctypes.c_int64),
        ("end_ns", ctypes.c_int64),
        ("bytes", ctypes.c_int64),
    ]


def trace_taker() -> tuple[ctypes.CDLL, Callable[[], list[tuple[str, int, int, int]]]]:
    """The tracing driver this process runs over (CUARROW_CUDA_DRIVER), and
    a function that takes the driver calls it recorded since the last take:
    (name, start ns, end ns, bytes) each."""
    trace = ctypes.CDLL(os.environ["CUARROW_CUDA_DRIVER"])
    trace.cuarrow_trace_take.argtypes = [ctypes.POINTER(Event), ctypes.c_int]
    buf = (Event * 65536)()

    def take() -> list[tuple[str, int, int, int]]:
        n = trace.cuarrow_trace_take(buf, len(buf))
        return [(buf[i].name.decode(), buf[i].start_ns, buf[i].end_ns, buf[i].bytes) for i in range(n)]

    return trace, take


def traced_env() -> dict[str, str]:
    """This process's environment with the tracing driver (bench/driver_trace.c:
    CUARROW_TRACE_SO when built elsewhere, else compiled here) in front of
    the driver CUARROW_CUDA_DRIVER names (the emulation's library by path)."""
    if os.environ.get("CUARROW_TRACE_SO"):  # built elsewhere (a machine without a compiler)
        out = Path(os.environ["CUARROW_TRACE_SO"]).resolve()
    else:
        out = Path(tempfile.mkdtemp(prefix="driver-trace-")) / "driver_trace.so"
        cmd = ["cc", "-O2", "-shared", "-fPIC", "-o", str(out), str(HERE / "driver_trace.c"), "-ldl"]
        subprocess.run(cmd, check=True)
    env = dict(os.environ)
    real = env.get("CUARROW_CUDA_DRIVER", "")
    if real == "emulated":
        import importlib.util

        spec = importlib.util.find_spec("cuarrow")
        roots = list(spec.submodule_search_locations or []) if spec is not None else []
        pattern = os.path.join("**", "libcuarrow_cuda_emulation.so")
        found = [p for r in roots for p in glob.glob(os.path.join(r, pattern), recursive=True)]
        if not found:
            raise SystemExit("the emulation's library was not found beside the cuarrow package")
        real = found[0]
    env[TRACED_ENV] = real or "libcuda.so.1"
    env["CUARROW_CUDA_DRIVER"] = str(out)
    return env


def reexec_traced() -> int:
    """This script again, over the tracing driver (traced_env)."""
    return subprocess.call([sys.executable, *sys.argv], env=traced_env())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table-bytes", type=parse_size, default=parse_size("2.2G"))
    ap.add_argument(
        "--batches", type=int, default=0, help="build the table in this many parts (0: ipc_bench's 2^21 rows a part)"
    )
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--dump", action="store_true", help="print every traced driver call of the last write")
    ap.add_argument("--gpu-timing", action="store_true", help="time each launch on the GPU too (events)")
    args = ap.parse_args()
    if TRACED_ENV not in os.environ:
        if args.gpu_timing:
            os.environ["CUARROW_TRACE_GPU"] = "1"
        return reexec_traced()

    import ipc_bench

    from cuarrow import cuda, ipc

    trace, take = trace_taker()
    trace.cuarrow_trace_gpu_take.argtypes = [ctypes.POINTER(ctypes.c_double), ctypes.c_int]
    gpu_buf = (ctypes.c_double * 8192)()

    def take_gpu() -> list[tuple[float, float]]:
        """The launches timed on the GPU since the last call: (start, end)
        in ms from the first one's start."""
        n = trace.cuarrow_trace_gpu_take(gpu_buf, len(gpu_buf) // 2)
        if n < 0:
            raise SystemExit("the GPU timing events could not be read")
        return [(gpu_buf[2 * i], gpu_buf[2 * i + 1]) for i in range(n)]

    ctx = cuda.Context(0)
    if args.batches > 0:
        # Parts of as many rows as make --batches of them: unsliced chunks,
        # one batch each on the device, as ipc_bench's (slices would keep
        # the writer from copying early: docs/ipc-format.md).
        import numpy as np

        sample = ipc_bench._part(np.random.default_rng(14), ipc_bench.Vocab(14), 0, 20_000)
        rows = max(int(args.table_bytes / (ipc_bench.table_bytes(sample) / sample.num_rows)), 1000)
        ipc_bench.PART_ROWS = -(-rows // args.batches)
    table = ipc_bench.build_table(args.table_bytes)
    device_table = cuda.to_device(table, ctx)
    schema = table.schema  # ipc_bench's: the host table's (one object, every call)
    del table
    print(f"gather kernel: {ctx.gather_status()}; {len(device_table.to_batches())} batches", flush=True)

    rows: list[dict[str, float]] = []
    before_first: list[list[tuple[str, float]]] = []
    size = 0
    gpu_rows: list[dict[str, Any]] = []
    for rep in range(args.reps + 2):  # two untimed calls first
        take()
        take_gpu()
        t0 = time.perf_counter_ns()
        w = ipc.new_stream(ctx, schema)
        t1 = time.perf_counter_ns()
        w.write_table(device_table)
        t2 = time.perf_counter_ns()
        out = w.close()
        t3 = time.perf_counter_ns()
        events = take()
        kernels = take_gpu() if args.gpu_timing else []
        size = out.size
        stats = w.stats()
        del out, w
        if rep < 2:
            continue
        launches = [e for e in events if e[0] == "cuLaunchKernel" and e[1] >= t0]
        copies = [e for e in events if e[1] >= t0 and e[0] != "cuCtxPushCurrent" and e[0] != "cuCtxPopCurrent"]
        first = launches[0][1] if launches else None
        row = {
            "total_us": (t3 - t0) / 1e3,
            "new_stream_us": (t1 - t0) / 1e3,
            "write_table_us": (t2 - t1) / 1e3,
            "close_us": (t3 - t2) / 1e3,
            "first_launch_us": (first - t0) / 1e3 if first else float("nan"),
            "last_launch_end_us": (launches[-1][2] - t0) / 1e3 if launches else float("nan"),
            "launches": len(launches),
            "driver_calls": len(copies),
            "syncs": sum(1 for e in events if e[0] == "cuStreamSynchronize"),
            "wait_us": stats["wait_seconds"] * 1e6,
        }
        rows.append(row)
        if kernels:
            gpu_rows.append(
                {
                    "span_us": (kernels[-1][1] - kernels[0][0]) * 1e3,
                    "kernel_us": [(e - b) * 1e3 for b, e in kernels],
                    "gap_us": [(kernels[i + 1][0] - kernels[i][1]) * 1e3 for i in range(len(kernels) - 1)],
                }
            )
        before_first.append([(e[0], (e[1] - t0) / 1e3) for e in copies if first is None or e[1] < first])
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(
        f"{size / 1e9:.2f} GB stream: call {med['total_us']:.0f} us (new_stream {med['new_stream_us']:.0f}, "
        f"write_table {med['write_table_us']:.0f}, close {med['close_us']:.0f}; wait {med['wait_us']:.0f})",
        flush=True,
    )
    print(
        f"first launch at {med['first_launch_us']:.1f} us after the call began; last launch queued by "
        f"{med['last_launch_end_us']:.1f} us; {med['launches']:.0f} launches, {med['driver_calls']:.0f} driver "
        f"calls, {med['syncs']:.0f} waits (medians of {len(rows)})",
        flush=True,
    )
    # The driver calls before the first launch, in the median call (by first_launch_us).
    mid = sorted(range(len(rows)), key=lambda i: rows[i]["first_launch_us"])[len(rows) // 2]
    if args.dump:
        for name, start, end, nbytes in events:
            if start >= t0:
                print(f"  {name:26s} at {(start - t0) / 1e3:9.1f} us, {(end - start) / 1e3:8.1f} us, {nbytes}")
    print("before the first launch (a median call): " + ", ".join(f"{n} @{t:.1f}" for n, t in before_first[mid]))
    result: dict[str, Any] = {"bytes": size, "medians": med, "calls": rows, "before_first_launch": before_first[mid]}
    if gpu_rows:
        # The call whose GPU span is the median one, kernel by kernel.
        g = sorted(gpu_rows, key=lambda r: r["span_us"])[len(gpu_rows) // 2]
        result["gpu"] = {"median_call": g, "calls": gpu_rows}
        print(
            f"on the GPU (the median call of {len(gpu_rows)}): first launch to last end {g['span_us']:.0f} us; "
            f"kernels {', '.join(f'{k:.0f}' for k in g['kernel_us'])} us; gaps "
            f"{', '.join(f'{k:.1f}' for k in g['gap_us']) or 'none'} us",
            flush=True,
        )
    try:
        import cupy
    except ImportError:
        cupy = None
    if cupy is not None:
        src, dst = cupy.empty(size, dtype=cupy.uint8), cupy.empty(size, dtype=cupy.uint8)
        rt = cupy.cuda.runtime
        samples = []
        for _ in range(args.reps + 1):
            t = time.perf_counter()
            rt.memcpy(dst.data.ptr, src.data.ptr, size, rt.memcpyDeviceToDevice)
            rt.streamSynchronize(0)
            samples.append(time.perf_counter() - t)
        raw = statistics.median(samples[1:]) * 1e6
        result["raw_us"] = raw
        print(f"raw D2D {raw:.0f} us: the stream {raw / med['total_us']:.3f} x raw", flush=True)
        if gpu_rows:
            span = result["gpu"]["median_call"]["span_us"]
            print(f"the kernels' span {raw / span:.3f} x raw (what the GPU alone takes)", flush=True)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
