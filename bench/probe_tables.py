#!/usr/bin/env python3
"""Where the time of a wide-table transfer goes: cuarrow's steps taken apart.

A diagnostic beside bench/bench.py: for a table of N columns of M bytes
(default 1000 x 1 MiB, the benchmark's wide table), the median time of the
whole ``to_device(table)`` / ``to_host()`` and of their steps (import of the
pyarrow data, the batched copy alone, the import back into pyarrow), beside
one buffer of the same bytes::

    PYTHONPATH=<installed cuarrow> python3 bench/probe_tables.py [--columns 1000] [--column-bytes 1M]
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
from probe_small import median_ns  # bench/ is the script's folder, first on sys.path


def median_ms(fn, reps: int) -> float:
    return median_ns(fn, reps, 1) / 1e6


def threaded_copy(table: pa.Table, out: np.ndarray, threads: int) -> None:
    """Every column's bytes copied into a row of `out` by `threads` threads
    (NumPy copies release the GIL), as the staging workers read them."""
    views = [np.frombuffer(c.chunks[0].buffers()[1], dtype=np.uint8) for c in table.columns]

    def work(k: int) -> None:
        for i in range(k, len(views), threads):
            np.copyto(out[i], views[i])

    ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--columns", type=int, default=1000)
    ap.add_argument("--column-bytes", default="1M")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    cb = args.column_bytes.upper()
    column_bytes = int(cb[:-1]) * units[cb[-1]] if cb[-1] in units else int(cb)

    from cuarrow import _cuarrow as lib
    from cuarrow import cuda

    ctx = cuda.Context(0)
    rows = column_bytes // 8
    table = pa.table({f"c{i}": np.full(rows, i, dtype=np.float64) for i in range(args.columns)})
    batch = table.to_batches()[0]
    total = args.columns * column_bytes
    one = np.ones(total, dtype=np.uint8)
    gb = total / 1e9

    def report(name: str, ms: float) -> None:
        print(f"{name:<55} {ms:8.2f} ms  {gb / (ms / 1e3):6.1f} GB/s", flush=True)

    print(f"{args.columns} columns x {column_bytes} bytes; options {cuda.transfer_options()}")
    report("one buffer: buffer_from_data", median_ms(lambda: ctx.buffer_from_data(one), args.reps))
    dev_one = ctx.buffer_from_data(one)
    report("one buffer: copy_to_host()", median_ms(lambda: dev_one.copy_to_host(), args.reps))
    report("to_device(table)", median_ms(lambda: cuda.to_device(table), args.reps))
    report(
        "  read_stream of the table (the import to_device makes)",
        median_ms(lambda: lib.read_stream(table.__arrow_c_stream__(), 2), args.reps),
    )
    held = []
    report(
        "  to_device(table), results kept (no free in the timing)",
        median_ms(lambda: held.append(cuda.to_device(table)), min(args.reps, 8)),
    )

    def drop() -> None:
        held.pop()

    report("  dropping one device table", median_ms(drop, min(args.reps, 8) - 1))
    held.clear()
    import gc

    gc.disable()
    report("  to_device(table), Python's gc off", median_ms(lambda: cuda.to_device(table), args.reps))
    gc.enable()
    imported = lib.import_batch(*batch.__arrow_c_array__())
    report(
        "  import of the pyarrow batch (C data interface)",
        median_ms(lambda: lib.import_batch(*batch.__arrow_c_array__()), args.reps),
    )
    report(
        "  batches_to_device alone (the batched copy, as to_device calls it)",
        median_ms(lambda: lib.batches_to_device([imported], ctx._ctx, None, validate=False), args.reps),
    )
    # Inside the copy module: the seconds the context counts for the batched
    # copy (from its first driver call to the end of the staged job); the
    # rest of batches_to_device is planning, allocation and the binding.
    inside = []

    def counted() -> None:
        ctx.reset_transfer_stats()
        lib.batches_to_device([imported], ctx._ctx, None, validate=False)
        inside.append(ctx.transfer_stats()["host_to_device_seconds"])

    median_ms(counted, args.reps)
    if sorted(inside)[len(inside) // 2] > 0:
        report("    of which inside the copy module (the context's count)", sorted(inside)[len(inside) // 2] * 1e3)
    else:
        print("    (the copy was not staged: the context counts no time for asynchronous direct copies)")
    try:  # what asking the driver whether each column is pinned costs (the copy asked before 2026-12-02 20:40)
        from cuda.bindings import driver as drv

        addresses = [c.chunks[0].buffers()[1].address for c in table.columns]
        attr = drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE
        ask = median_ms(lambda: [drv.cuPointerGetAttribute(attr, a) for a in addresses], args.reps)
        floor = median_ms(lambda: [(attr, a) for a in addresses], args.reps)
        report(
            f"  cuPointerGetAttribute on each column (cuda.bindings, {floor:.2f} ms Python floor taken off)",
            ask - floor,
        )
    except Exception as e:  # noqa: BLE001 - cuda.bindings is optional
        print(f"  (no cuda.bindings for the pointer-query figure: {e})")
    for threads in (6, 12):
        saved = cuda.transfer_options()
        cuda.set_transfer_options(staging_threads_to_device=threads)
        report(
            f"  batches_to_device alone, {threads} threads",
            median_ms(lambda: lib.batches_to_device([imported], ctx._ctx, None, validate=False), args.reps),
        )
        cuda.set_transfer_options(**saved)
    # The sources' memory: the benchmark's columns are separate 1 MiB
    # allocations (4 KiB pages), the single buffer one large NumPy array
    # (transparent huge pages where the kernel gives them).  The same table
    # with its columns cut from one large array separates the two effects.
    big = np.ones(total // 8, dtype=np.float64)
    per = rows
    sliced = pa.table({f"c{i}": big[i * per : (i + 1) * per] for i in range(args.columns)})
    report("to_device(table), columns cut from one large array", median_ms(lambda: cuda.to_device(sliced), args.reps))
    rows_out = np.empty((args.columns, column_bytes), dtype=np.uint8)
    report("  host memcpy of the columns, 8 threads", median_ms(lambda: threaded_copy(table, rows_out, 8), args.reps))
    report(
        "  host memcpy of the cut columns, 8 threads", median_ms(lambda: threaded_copy(sliced, rows_out, 8), args.reps)
    )
    rows_out = None  # frees the copy target (a del reads to linters as if the lambdas above ran later)
    try:
        thp = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()
    except OSError:
        thp = "unknown"
    print(f"  transparent huge pages: {thp}")
    d = cuda.to_device(table)
    report("DeviceTable.to_host()", median_ms(lambda: d.to_host(), args.reps))
    data = d._batches[0]._data

    def copy_only() -> None:  # the batched copy and the capsules, waited for
        transfer, _ = lib.batches_to_host_begin([data], None)
        transfer.wait()

    def copy_then_import() -> None:  # the same, with pyarrow's import after the wait (nothing overlapped)
        transfer, capsules = lib.batches_to_host_begin([data], None)
        transfer.wait()
        [pa.RecordBatch._import_from_c(lib.capsule_address(c), table.schema) for c in capsules]

    report("  batches_to_host_begin + wait (the batched copy)", median_ms(copy_only, args.reps))
    report("  the same, then pyarrow's import (not overlapped)", median_ms(copy_then_import, args.reps))
    assert d.to_host().equals(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
