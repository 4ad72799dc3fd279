#!/usr/bin/env python3
"""Where the time of a 4-byte transfer goes: cuarrow's calls taken apart.

A diagnostic beside bench/bench.py (which gives the figures that count):
medians of many calls of each step of ``buffer_from_data`` and
``copy_to_host`` on 4 bytes, and the raw driver calls for reference::

    PYTHONPATH=<installed cuarrow> python3 bench/probe_small.py [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench import median_time  # noqa: E402 - found through the line above


def median_ns(fn, reps: int, warmups: int) -> float:
    """The median time of `reps` calls of `fn`, each timed on its own, after
    `warmups` untimed ones (bench/probe_tables.py uses it too)."""
    return median_time(fn, reps, warmups) * 1e9


def median_us(fn, reps: int = 3000) -> float:
    return median_ns(fn, reps, 200) / 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    from cuarrow import _cuarrow as lib  # the extension module
    from cuarrow import cuda

    ctx = cuda.Context(0)
    a4 = np.arange(1, dtype=np.int32)
    out4 = np.zeros(1, dtype=np.int32)
    dev = ctx.buffer_from_data(a4)
    rows = {}
    rows["cuarrow buffer_from_data(4 B)"] = median_us(lambda: ctx.buffer_from_data(a4))
    rows["cuarrow copy_to_host() 4 B"] = median_us(lambda: dev.copy_to_host())
    rows["cuarrow copy_to_host(buf=) 4 B"] = median_us(lambda: dev.copy_to_host(buf=out4))
    rows["cuarrow copy_from_host(4 B) into a buffer"] = median_us(lambda: dev.copy_from_host(a4))
    rows["_lib.allocate_device(4) (pool alloc + free)"] = median_us(lambda: lib.allocate_device(ctx._ctx, 4))
    rows["_lib.copy_from_host(4 B)"] = median_us(lambda: lib.copy_from_host(dev, 0, a4, 0, 4))
    rows["CudaBuffer._wrap"] = median_us(lambda: cuda.CudaBuffer._wrap(dev))
    rows["Python call of nothing (floor)"] = median_us(lambda: None)
    try:
        import cupy

        rt = cupy.cuda.runtime
        ptr = cupy.cuda.alloc(4)
        host = a4.ctypes.data
        rows["raw cudaMemcpy H2D 4 B + sync"] = median_us(
            lambda: (rt.memcpy(ptr.ptr, host, 4, rt.memcpyHostToDevice), rt.streamSynchronize(0))
        )
        rows["raw cudaMemcpy D2H 4 B + sync"] = median_us(
            lambda: (rt.memcpy(out4.ctypes.data, ptr.ptr, 4, rt.memcpyDeviceToHost), rt.streamSynchronize(0))
        )
        rows["raw cudaMallocAsync+cudaFreeAsync 4 B"] = median_us(lambda: rt.freeAsync(rt.mallocAsync(4, 0), 0))
    except Exception as e:  # noqa: BLE001 - CuPy is optional
        print(f"skipped the raw references: {e}", file=sys.stderr)
    width = max(len(k) for k in rows)
    for k, v in rows.items():
        print(f"{k:<{width}}  {v:8.2f} µs")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "probe_small.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
